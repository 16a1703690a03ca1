package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGroupRefusal: a version the publisher cannot publish for a reason that waiting cannot
// cure is refused with a record that names the ranks: its parts and markers go, a rank
// waiting on it fails with ErrGroupRefused and the reason, a rank beginning it fails at
// once, a record sealed late is deleted, the next version is published, and the refusal
// record goes with the group's other records once it is.
func TestGroupRefusal(t *testing.T) {
	files := smallFiles(t, 5)
	cases := []struct {
		name   string
		write  func(t *testing.T, gs *groupStore) // writes the refused version(s)
		kind   string
		refuse []uint64 // versions refused
		blamed []int
		says   []string
		next   uint64 // the version written after, by both ranks
	}{{
		name: "two ranks wrote one file",
		write: func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, func(n string) bool { return shardOwner(n, 2) == 0 || n == "config.json" })
			writeOK(t, gs.ranks[1], 1, files, func(n string) bool { return shardOwner(n, 2) == 1 || n == "config.json" })
		},
		kind: RefusedConflict, refuse: []uint64{1}, blamed: []int{0, 1},
		says: []string{"file config.json is written by rank 0 and by rank 1"}, next: 2,
	}, {
		name: "ranks sealed different version numbers",
		write: func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, func(n string) bool { return shardOwner(n, 2) == 0 })
			writeOK(t, gs.ranks[1], 2, files, func(n string) bool { return shardOwner(n, 2) == 1 })
		},
		kind: RefusedMismatch, refuse: []uint64{1, 2}, blamed: []int{1},
		says: []string{"rank 1 sealed no part of it (rank 1 wrote version 2)"}, next: 3,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gs := newGroupStore(t, "g", 2)
			c.write(t, gs)
			published, refused, err := gs.pub.PublishReady("g", 2)
			if err != nil || len(published) != 0 || len(refused) != 1 {
				t.Fatalf("PublishReady: published %v, refused %v, %v", published, refused, err)
			}
			for _, s := range c.says {
				if !strings.Contains(refused[0].Error(), s) {
					t.Fatalf("refusal %q does not say %q", refused[0], s)
				}
			}
			gr, _ := gs.pub.groups.publisher.records()
			for _, v := range c.refuse {
				ref, err := readRefusal(gr, "g", v)
				if err != nil || ref == nil {
					t.Fatalf("refusal record of version %d: %v, %v", v, ref, err)
				}
				if ref.Kind != c.kind || !slices.Equal(ref.Blamed, c.blamed) || ref.Ranks != 2 || ref.Reason != refused[0].Error() {
					t.Fatalf("refusal record of version %d: %+v", v, ref)
				}
				want := []string{recordName("g", v, -1, recordRefused)}
				var got []string
				for _, n := range groupRecordNames(t, gs.pub) {
					if strings.HasPrefix(n, "g/"+manifestName(v)+"/") {
						got = append(got, n)
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("records of refused version %d: %v, want only %v", v, got, want)
				}
				// Every rank waiting on it learns it, with the reason.
				for r, s := range gs.ranks {
					_, err := s.WaitPublished(context.Background(), v, time.Millisecond)
					if !errors.Is(err, ErrGroupRefused) || !strings.Contains(err.Error(), c.says[0]) {
						t.Fatalf("rank %d waiting on version %d: %v", r, v, err)
					}
					if _, err := s.NewPart(v); !errors.Is(err, ErrGroupRefused) {
						t.Fatalf("rank %d beginning refused version %d: %v", r, v, err)
					}
				}
				// Publishing it again is refused at once, and publishes nothing.
				if _, err := gs.pub.PublishGroup("g", v, 2); !errors.Is(err, ErrGroupRefused) {
					t.Fatalf("publish refused version %d: %v", v, err)
				}
			}
			if _, ok := gs.pub.Latest(); ok {
				t.Fatal("a refused version appeared")
			}
			// A part sealed after the refusal is deleted by the next poll, never published.
			w, err := gs.ranks[0].NewPart(c.next+10, "late.json")
			if err != nil {
				t.Fatal(err)
			}
			w.Abort()
			gs.pub.groups.publisher.refuseVersion(gr, "g", 2, c.next+10, RefusedAborted, nil, "test")
			if err := gr.PutRecord(RecordGroup, recordName("g", c.next+10, 0, recordOpen), []byte("late")); err != nil {
				t.Fatal(err)
			}
			if _, refused, err := gs.pub.PublishReady("g", 2); err != nil || len(refused) != 0 {
				t.Fatalf("second poll: refused %v, %v", refused, err)
			}
			for _, n := range groupRecordNames(t, gs.pub) {
				if strings.Contains(n, "rank-0.open") {
					t.Fatalf("late record %s of a refused version left", n)
				}
			}
			// The group writes its next save under a higher number, and it is published.
			gs.writeParts(t, c.next, files)
			published, refused, err = gs.pub.PublishReady("g", 2)
			if err != nil || len(refused) != 0 || len(published) != 1 || published[0].Number != c.next {
				t.Fatalf("next version: published %v, refused %v, %v", published, refused, err)
			}
			sameTree(t, "next", exportHashes(t, gs.pub, c.next), fileHashes(files))
			for _, n := range groupRecordNames(t, gs.pub) {
				if k, _ := parseRecordName(n); k.v <= c.next {
					t.Fatalf("record %s left after version %d was published", n, c.next)
				}
			}
		})
	}
}

// TestGroupWaitBound: a rank whose publisher never comes stops waiting when its context
// ends, and the error says which ranks sealed and which did not begin.
func TestGroupWaitBound(t *testing.T) {
	gs := newGroupStore(t, "g", 3)
	files := smallFiles(t, 5)
	writeOK(t, gs.ranks[0], 1, files, func(n string) bool { return shardOwner(n, 3) == 0 })
	if _, err := gs.ranks[1].NewPart(1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := gs.ranks[0].WaitPublished(ctx, 1, 5*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "rank 0 sealed, rank 1 writing, rank 2 not begun") {
		t.Fatalf("wait without a publisher: %v", err)
	}
}

// TestGroupStatusAndCancel: GroupStatus says, by version, which ranks sealed, which are
// writing and how many ranks there are; a reader (no writer's lock: the publisher runs
// beside it) cancels a version that cannot complete, blaming the ranks without a part; the
// rank waiting on it fails with ErrGroupRefused; a taken version is not cancelled.
func TestGroupStatusAndCancel(t *testing.T) {
	gs := newGroupStore(t, "g", 3)
	files := smallFiles(t, 5)
	writeOK(t, gs.ranks[0], 1, files, func(n string) bool { return shardOwner(n, 3) == 0 })
	if _, err := gs.ranks[1].NewPart(1); err != nil {
		t.Fatal(err)
	}
	rd, err := Open(gs.root, Options{ReadOnly: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	sts, err := rd.GroupStatus("g")
	if err != nil || len(sts) != 1 {
		t.Fatalf("status: %+v, %v", sts, err)
	}
	if st := sts[0]; st.Version != 1 || st.Ranks != 3 || !slices.Equal(st.Sealed, []int{0}) || !slices.Equal(st.Writing, []int{1}) || st.Taken || st.Refused != nil {
		t.Fatalf("status of version 1: %+v", st)
	}
	if err := rd.CancelGroupVersion("g", 1, 0, "node 2 is gone"); err != nil {
		t.Fatal(err)
	}
	_, err = gs.ranks[0].WaitPublished(context.Background(), 1, time.Millisecond)
	if !errors.Is(err, ErrGroupRefused) || !strings.Contains(err.Error(), "ranks 1, 2 had sealed no part (node 2 is gone)") {
		t.Fatalf("rank 0 waiting on a cancelled version: %v", err)
	}
	sts, err = rd.GroupStatus("g")
	if err != nil || len(sts) != 1 || sts[0].Refused == nil || sts[0].Refused.Kind != RefusedAborted ||
		!slices.Equal(sts[0].Refused.Blamed, []int{1, 2}) || len(sts[0].Sealed)+len(sts[0].Writing) != 0 {
		t.Fatalf("status after the cancel: %+v, %v", sts, err)
	}
	// The group goes on under a higher number; version 1 is then taken.
	gs.writeParts(t, 2, files)
	if _, err := gs.pub.PublishGroup("g", 2, 3); err != nil {
		t.Fatal(err)
	}
	if err := rd.CancelGroupVersion("g", 2, 3, ""); !errors.Is(err, ErrVersionNotAbove) {
		t.Fatalf("cancel a published version: %v", err)
	}
	if sts, err := rd.GroupStatus("g"); err != nil || len(sts) != 0 {
		t.Fatalf("status after the publish: %+v, %v", sts, err)
	}
}
