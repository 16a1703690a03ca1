package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestGroupWrongGroupNotDone: a rank started with a mistyped group name ("run8" for "run7")
// seals its part of the same version number as the real group; when run7 publishes that
// number, the run7 ranks' waits return the version, and the run8 rank's wait fails
// (ErrGroupMismatch) naming its group, the group that published and what to do: its files
// are in no version. A rank whose part is exactly what was published is done.
func TestGroupWrongGroupNotDone(t *testing.T) {
	files := smallFiles(t, 3)
	mine := func(r int) func(string) bool { return func(n string) bool { return shardOwner(n, 2) == r } }
	forged := smallFiles(t, 4) // the mistyped rank's own save: other bytes
	cases := []struct {
		name  string
		files map[string][]byte
		mine  func(string) bool
		says  []string
	}{
		{"other bytes of the same file", forged, mine(1),
			[]string{"group run8", "group run7", "model-00002-of-00002.safetensors", "--group", "in no version"}},
		{"a file the version does not hold", map[string][]byte{"extra.json": []byte("{}")}, func(string) bool { return true },
			[]string{"group run8", "group run7", "extra.json", "not in it", "in no version"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gs := newGroupStore(t, "run7", 2)
			wrong := openRank(t, gs.root, Rank{Group: "run8", Rank: 1, Ranks: 2})
			writeOK(t, wrong, 1, c.files, c.mine)
			// The mistyped rank waits while the real group's parts are sealed (it sees
			// run7's records), then run7 publishes.
			gs.writeParts(t, 1, files)
			waited := make(chan error, 1)
			go func() {
				_, err := wrong.WaitPublished(context.Background(), 1, time.Millisecond)
				waited <- err
			}()
			for seen := false; !seen; time.Sleep(time.Millisecond) {
				select {
				case err := <-waited:
					t.Fatalf("the mistyped rank's wait ended before run7 published: %v", err)
				default:
				}
				wrong.groups.rank.mu.Lock()
				seen = wrong.groups.rank.others[1]["run7"]
				wrong.groups.rank.mu.Unlock()
			}
			if _, err := gs.pub.PublishGroup("run7", 1, 2); err != nil {
				t.Fatal(err)
			}
			for r, s := range gs.ranks {
				if info, err := s.WaitPublished(context.Background(), 1, time.Millisecond); err != nil || info.Number != 1 {
					t.Fatalf("run7 rank %d: %+v, %v", r, info, err)
				}
			}
			err := <-waited
			if !errors.Is(err, ErrGroupMismatch) {
				t.Fatalf("the mistyped rank's wait: %v, want ErrGroupMismatch", err)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("the mistyped rank's error %q does not say %q", err, s)
				}
			}
			t.Logf("the mistyped rank: %v", err)
			// Asked again (a second close of DONE), it says the same.
			if _, err := wrong.WaitPublished(context.Background(), 1, time.Millisecond); !errors.Is(err, ErrGroupMismatch) {
				t.Fatalf("the mistyped rank's second wait: %v", err)
			}
		})
	}
}

// TestGroupPublishRefusesForgedPart: a part record whose files do not hash to their recorded
// SHA-256 (the hash changed, or a file's object swapped for another stored one, the CRC
// recomputed) is refused by the publisher (RefusedDamaged, ErrCorrupt, naming the rank and the
// file): no version appears that would read EIO, and the ranks' waits fail with the reason.
func TestGroupPublishRefusesForgedPart(t *testing.T) {
	files := smallFiles(t, 5)
	cases := []struct {
		name  string
		forge func(rec *partRecord, other *partRecord)
		file  string
	}{
		{"a SHA-256 of other bytes", func(rec, _ *partRecord) {
			rec.Files[0].SHA256 = ID(sha256.Sum256([]byte("not these bytes")))
		}, "config.json"},
		{"a tensor's object swapped for another rank's", func(rec, other *partRecord) {
			rec.Files[1].Tensors[0].ID = other.Files[0].Tensors[0].ID
		}, "model-00001-of-00002.safetensors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gs := newGroupStore(t, "g", 2)
			gs.writeParts(t, 1, files)
			gr, _ := gs.pub.groups.publisher.records()
			read := func(r int) *partRecord {
				name := recordName("g", 1, r, recordPart)
				k, _ := parseRecordName(name)
				data, err := gr.GetRecord(RecordGroup, name)
				if err != nil {
					t.Fatal(err)
				}
				rec, err := decodePart(data, k)
				if err != nil {
					t.Fatal(err)
				}
				return rec
			}
			rec, other := read(0), read(1)
			if rec.Files[0].Path != "config.json" || rec.Files[1].Path != "model-00001-of-00002.safetensors" {
				t.Fatalf("rank 0's files: %v, %v", rec.Files[0].Path, rec.Files[1].Path)
			}
			c.forge(rec, other)
			data, err := encodePart(rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := gr.PutRecord(RecordGroup, recordName("g", 1, 0, recordPart), data); err != nil {
				t.Fatal(err)
			}
			if _, err := gs.pub.PublishGroup("g", 1, 2); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "rank 0") || !strings.Contains(err.Error(), c.file) {
				t.Fatalf("publish a forged part: %v, want ErrCorrupt naming rank 0 and %s", err, c.file)
			}
			published, refused, err := gs.pub.PublishReady("g", 2)
			if err != nil || len(published) != 0 || len(refused) != 1 {
				t.Fatalf("PublishReady: published %v, refused %v, %v", published, refused, err)
			}
			if _, ok := gs.pub.Latest(); ok {
				t.Fatal("a version of a forged part appeared")
			}
			ref, err := readRefusal(gr, "g", 1)
			if err != nil || ref == nil || ref.Kind != RefusedDamaged || len(ref.Blamed) != 1 || ref.Blamed[0] != 0 {
				t.Fatalf("refusal record: %+v, %v", ref, err)
			}
			for r, s := range gs.ranks {
				if _, err := s.WaitPublished(context.Background(), 1, time.Millisecond); !errors.Is(err, ErrGroupRefused) || !strings.Contains(err.Error(), c.file) {
					t.Fatalf("rank %d waiting on the refused version: %v", r, err)
				}
			}
		})
	}
}
