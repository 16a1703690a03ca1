package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
)

func fileHashes(files map[string][]byte) map[string]string {
	out := map[string]string{}
	for n, b := range files {
		sum := sha256.Sum256(b)
		out[n] = hex.EncodeToString(sum[:])
	}
	return out
}

// TestGroupPublisherCrash kills the publisher at each point of its seal: after a restart
// the version is there whole (and reads back exactly) or absent, with its parts still
// publishable; the restarted writer's sweep takes none of their objects.
func TestGroupPublisherCrash(t *testing.T) {
	series := groupSeries(t, 2)
	for _, point := range []string{"seal-objects-written", "seal-objects-synced", "seal-manifest-written", "seal-index-updated"} {
		t.Run(point, func(t *testing.T) {
			gs := newGroupStore(t, "g", 4)
			gs.writeParts(t, 1, series[0])
			if _, err := gs.pub.PublishGroup("g", 1, 4); err != nil {
				t.Fatal(err)
			}
			gs.writeParts(t, 2, series[1])
			gs.pub.hook = func(p string) error {
				if p == point {
					return errInjected
				}
				return nil
			}
			if _, err := gs.pub.PublishGroup("g", 2, 4); !errors.Is(err, errInjected) {
				t.Fatalf("publish with a crash at %s: %v", point, err)
			}
			crash(gs.pub)
			pub := openStore(t, gs.root, Options{})
			present := pub.versions.isSealed(2)
			if want := strings.HasPrefix(point, "seal-manifest") || point == "seal-index-updated"; present != want {
				t.Fatalf("after a crash at %s: version 2 present %v, want %v", point, present, want)
			}
			if !present {
				if _, err := pub.PublishGroup("g", 2, 4); err != nil {
					t.Fatalf("publish again after the crash: %v", err)
				}
			} else if _, err := pub.GC(10); err != nil { // the sweep cleans the published version's records
				t.Fatal(err)
			}
			for v, files := range series {
				sameTree(t, fmt.Sprintf("v%d after a crash at %s", v+1, point), exportHashes(t, pub, uint64(v+1)), fileHashes(files))
			}
			if left := groupRecordNames(t, pub); len(left) != 0 {
				t.Fatalf("records left: %v", left)
			}
		})
	}
}

// TestGroupRankKilled kills a rank mid-version: the writer's gc meanwhile deletes none of
// its objects, the version does not appear, and once the rank restarts and writes its part
// again it does.
func TestGroupRankKilled(t *testing.T) {
	t.Setenv(looseObjectsEnv, "1") // loose objects: it damages object files, or needs gc of packs (not yet)
	series := groupSeries(t, 2)
	gs := newGroupStore(t, "g", 4)
	gs.writeParts(t, 1, series[0])
	if _, err := gs.pub.PublishGroup("g", 1, 4); err != nil {
		t.Fatal(err)
	}
	files := series[1]
	for r := range 3 {
		writeOK(t, gs.ranks[r], 2, files, func(n string) bool { return shardOwner(n, 4) == r })
	}
	// Rank 3 stores its shard, then dies before its part is sealed.
	shard := "model-00004-of-00004.safetensors"
	w, err := gs.ranks[3].NewPart(2, shard)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(shard, bytes.NewReader(files[shard]), int64(len(files[shard])), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	var orphans []ID
	for id := range w.created {
		orphans = append(orphans, id)
	}
	w.mu.Unlock()
	if len(orphans) == 0 {
		t.Fatal("the rank stored nothing")
	}
	crash(gs.ranks[3])
	// The writer's gc (a retention gc after another seal, say) spares the dead rank's
	// objects: it cannot know which part will name them.
	if _, err := gs.pub.GC(1); err != nil {
		t.Fatal(err)
	}
	for _, id := range orphans {
		if !gs.pub.ingest.exists(id) {
			t.Fatalf("gc deleted object %s of a rank that was writing", id)
		}
	}
	_, err = gs.pub.PublishGroup("g", 2, 4)
	if !errors.Is(err, ErrGroupIncomplete) || !strings.Contains(err.Error(), "rank 3 is writing") {
		t.Fatalf("publish without rank 3: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := gs.pub.PublishGroupWait(ctx, "g", 2, 4, 10*time.Millisecond); !errors.Is(err, ErrGroupIncomplete) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish waiting for rank 3: %v", err)
	}
	if _, ok := gs.pub.Latest(); !ok || gs.pub.versions.isSealed(2) {
		t.Fatal("version 2 appeared without rank 3's part")
	}
	// Rank 3 restarts and writes its part again; the waiting publisher publishes, and rank 0,
	// waiting for the version before its next part, sees it.
	seen := make(chan error, 1)
	go func() { seen <- gs.ranks[0].WaitVersion(context.Background(), 2, 5*time.Millisecond) }()
	gs.ranks[3] = openRank(t, gs.root, Rank{Group: "g", Rank: 3, Ranks: 4})
	done := make(chan error, 1)
	go func() {
		_, err := gs.pub.PublishGroupWait(context.Background(), "g", 2, 4, 5*time.Millisecond)
		done <- err
	}()
	writeOK(t, gs.ranks[3], 2, files, func(n string) bool { return n == shard })
	if err := <-done; err != nil {
		t.Fatalf("publish once rank 3 wrote its part: %v", err)
	}
	if err := <-seen; err != nil {
		t.Fatalf("rank 0 waiting for version 2: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := gs.ranks[0].WaitVersion(ctx, 3, 5*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait for a version nobody publishes: %v", err)
	}
	sameTree(t, "v2", exportHashes(t, gs.pub, 2), fileHashes(files))
}

// TestGroupStaleRecords: records of a version that can no longer be published (a group
// abandoned at version 1 while another published it) are deleted by gc's sweep, and the
// objects only they named with them.
func TestGroupStaleRecords(t *testing.T) {
	t.Setenv(looseObjectsEnv, "1") // loose objects: it damages object files, or needs gc of packs (not yet)
	gs := newGroupStore(t, "g", 2)
	files := smallFiles(t, 1)
	old := openRank(t, gs.root, Rank{Group: "old", Rank: 0, Ranks: 1})
	w, err := old.NewPart(1, "lonely.bin")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("lonely.bin", bytes.NewReader([]byte("only the abandoned rank has this")), 32, 0o644); err != nil {
		t.Fatal(err)
	}
	crash(old)
	for r := range 2 {
		writeOK(t, gs.ranks[r], 1, files, func(n string) bool { return shardOwner(n, 2) == r })
	}
	if _, err := gs.pub.PublishGroup("g", 1, 2); err != nil {
		t.Fatal(err)
	}
	if left := groupRecordNames(t, gs.pub); len(left) != 1 || !strings.HasPrefix(left[0], "old/v000001/rank-0.open") {
		t.Fatalf("records after the publish: %v", left)
	}
	st, err := gs.pub.GC(5)
	if err != nil {
		t.Fatal(err)
	}
	if left := groupRecordNames(t, gs.pub); len(left) != 0 {
		t.Fatalf("records after gc: %v", left)
	}
	if st.DeletedObjects != 1 {
		t.Fatalf("gc deleted %d objects, want the abandoned rank's 1", st.DeletedObjects)
	}
}

// TestGroupSidesRefused: a rank does not seal or gc, a writer does not write parts, a
// reader does not publish, and one rank is one process.
func TestGroupSidesRefused(t *testing.T) {
	gs := newGroupStore(t, "g", 2)
	r0 := gs.ranks[0]
	w, err := r0.NewPart(1, "a.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("a.json", bytes.NewReader([]byte("{}")), 2, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Seal(); !errors.Is(err, ErrGroupRank) {
		t.Fatalf("a rank's Seal: %v", err)
	}
	if err := w.AddFile("b.json", bytes.NewReader([]byte("{}")), 2, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.SealPart(); !errors.Is(err, ErrBadPath) || !strings.Contains(err.Error(), "b.json") {
		t.Fatalf("a part with a file not owned: %v", err)
	}
	w.Abort()
	if _, err := r0.GC(1); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("a rank's gc: %v", err)
	}
	if _, err := gs.pub.NewPart(1); !errors.Is(err, ErrGroupRank) {
		t.Fatalf("the writer's NewPart: %v", err)
	}
	if _, err := r0.PublishGroup("g", 1, 2); !errors.Is(err, ErrGroupRank) {
		t.Fatalf("a rank's publish: %v", err)
	}
	if _, err := OpenRank(gs.root, Rank{Group: "g", Rank: 0, Ranks: 2}, Options{CacheDir: t.TempDir()}); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second process as rank 0: %v", err)
	}
	for _, r := range []Rank{{"g", 2, 2}, {"g", -1, 2}, {"", 0, 1}, {"../x", 0, 1}, {"g", 0, MaxRanks + 1}} {
		if _, err := OpenRank(gs.root, r, Options{CacheDir: t.TempDir()}); err == nil {
			t.Fatalf("open as %+v: no error", r)
		}
	}
}

// TestGroupRankCrashPoints kills a rank at each point of its SealPart: before its part
// record the version waits for it (and takes it once the restarted rank writes again); after
// it, the part counts, its leftover open marker notwithstanding.
func TestGroupRankCrashPoints(t *testing.T) {
	files := smallFiles(t, 3)
	for _, point := range []string{"part-objects-written", "part-written"} {
		t.Run(point, func(t *testing.T) {
			gs := newGroupStore(t, "g", 2)
			writeOK(t, gs.ranks[0], 1, files, func(n string) bool { return shardOwner(n, 2) == 0 })
			mine := func(n string) bool { return shardOwner(n, 2) == 1 }
			gs.ranks[1].hook = func(p string) error {
				if p == point {
					return errInjected
				}
				return nil
			}
			if _, err := writePart(gs.ranks[1], 1, files, mine); !errors.Is(err, errInjected) {
				t.Fatalf("part with a crash at %s: %v", point, err)
			}
			crash(gs.ranks[1])
			_, err := gs.pub.PublishGroup("g", 1, 2)
			if point == "part-objects-written" {
				if !errors.Is(err, ErrGroupIncomplete) {
					t.Fatalf("publish after rank 1 died before its part: %v", err)
				}
				gs.ranks[1] = openRank(t, gs.root, Rank{Group: "g", Rank: 1, Ranks: 2})
				writeOK(t, gs.ranks[1], 1, files, mine)
				_, err = gs.pub.PublishGroup("g", 1, 2)
			}
			if err != nil {
				t.Fatalf("publish: %v", err)
			}
			sameTree(t, "v1", exportHashes(t, gs.pub, 1), fileHashes(files))
			if left := groupRecordNames(t, gs.pub); len(left) != 0 {
				t.Fatalf("records left: %v", left)
			}
		})
	}
}

// TestGroupGCWhileRankWrites: a gc that drops versions while a rank is writing deletes the
// dropped versions' objects, and none of the rank's (which nothing names yet); the rank's
// version then publishes and reads back.
func TestGroupGCWhileRankWrites(t *testing.T) {
	t.Setenv(looseObjectsEnv, "1") // loose objects: it damages object files, or needs gc of packs (not yet)
	series := groupSeries(t, 4)
	gs := newGroupStore(t, "g", 4)
	for v := uint64(1); v <= 3; v++ {
		gs.writeParts(t, v, series[v-1])
		if _, err := gs.pub.PublishGroup("g", v, 4); err != nil {
			t.Fatal(err)
		}
	}
	files := series[3]
	shard := "model-00002-of-00004.safetensors"
	w, err := gs.ranks[1].NewPart(4, shard)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(shard, bytes.NewReader(files[shard]), int64(len(files[shard])), 0o644); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	var fresh []ID
	for id := range w.created {
		fresh = append(fresh, id)
	}
	w.mu.Unlock()
	st, err := gs.pub.GC(1)
	if err != nil {
		t.Fatal(err)
	}
	if st.DroppedVersions != 2 || st.DeletedObjects == 0 {
		t.Fatalf("gc while a rank writes: %+v: the dropped versions' objects were not deleted", st)
	}
	for _, id := range fresh {
		if !gs.pub.ingest.exists(id) {
			t.Fatalf("gc deleted object %s of the rank that was writing", id)
		}
	}
	if _, err := w.SealPart(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{0, 2, 3} {
		writeOK(t, gs.ranks[r], 4, files, func(n string) bool { return shardOwner(n, 4) == r })
	}
	if _, err := gs.pub.PublishGroup("g", 4, 4); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "v4", exportHashes(t, gs.pub, 4), fileHashes(files))
	// With no rank writing, a sweep finds nothing left to delete.
	gs.pub.writeMu.Lock()
	n, _, err := gs.pub.collector.sweepLocked()
	gs.pub.writeMu.Unlock()
	if err != nil || n != 0 {
		t.Fatalf("a sweep after the publish deleted %d objects (%v)", n, err)
	}
}

// TestGroupRankRestartKeepsItsCopy: a rank started again knows the files it owned and takes
// up the copy its earlier run left, without rebuilding it: its next part, declared with no
// files, diffs every tensor against its base.
func TestGroupRankRestartKeepsItsCopy(t *testing.T) {
	series := groupSeries(t, 3)
	gs := newGroupStore(t, "g", 4)
	for v := uint64(1); v <= 2; v++ {
		gs.writeParts(t, v, series[v-1])
		if _, err := gs.pub.PublishGroup("g", v, 4); err != nil {
			t.Fatal(err)
		}
	}
	cache := gs.ranks[2].cache.dir
	if err := gs.ranks[2].Close(); err != nil {
		t.Fatal(err)
	}
	s, err := OpenRank(gs.root, Rank{Group: "g", Rank: 2, Ranks: 4}, Options{CacheDir: cache, Logger: logtest.New(t.Logf)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	gs.ranks[2] = s
	shard := "model-00003-of-00004.safetensors"
	if !s.groups.rank.own[shard] || len(s.groups.rank.own) != 1 {
		t.Fatalf("the restarted rank owns %v, want %s", s.groups.rank.own, shard)
	}
	files := series[2]
	w, err := s.NewPart(3) // owns nothing new
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile(shard, bytes.NewReader(files[shard]), int64(len(files[shard])), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := w.SealPart()
	if err != nil {
		t.Fatal(err)
	}
	rec := readPart(t, gs.pub, "g/v000003/rank-2.part")
	for _, tn := range rec.Files[0].Tensors {
		if tn.Base.IsZero() {
			t.Fatalf("tensor %s of the restarted rank's part has no base", tn.Name)
		}
	}
	if info.ObjectBytes*10 > int64(len(files[shard])) {
		t.Fatalf("the restarted rank stored %d bytes for a %d-byte shard: not deltas", info.ObjectBytes, len(files[shard]))
	}
	for _, r := range []int{0, 1, 3} {
		writeOK(t, gs.ranks[r], 3, files, func(n string) bool { return shardOwner(n, 4) == r })
	}
	if _, err := gs.pub.PublishGroup("g", 3, 4); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "v3", exportHashes(t, gs.pub, 3), fileHashes(files))
}

// TestGroupPublishReady: the publisher's poll publishes a version once its last part is
// sealed, and nothing before or after.
func TestGroupPublishReady(t *testing.T) {
	gs := newGroupStore(t, "g", 2)
	files := smallFiles(t, 5)
	writeOK(t, gs.ranks[0], 1, files, func(n string) bool { return shardOwner(n, 2) == 0 })
	if got, _, err := gs.pub.PublishReady("g", 2); err != nil || len(got) != 0 {
		t.Fatalf("with a part missing: published %v, %v", got, err)
	}
	writeOK(t, gs.ranks[1], 1, files, func(n string) bool { return shardOwner(n, 2) == 1 })
	if got, _, err := gs.pub.PublishReady("g", 2); err != nil || len(got) != 1 || got[0].Number != 1 {
		t.Fatalf("with every part: published %v, %v", got, err)
	}
	if got, _, err := gs.pub.PublishReady("g", 2); err != nil || len(got) != 0 {
		t.Fatalf("again: published %v, %v", got, err)
	}
}

// TestGroupDamagedOwnedList: the list of owned files a rank keeps in its cache directory is
// a cache. Damaged, it is reported and ignored: the restarted rank owns what it writes anew,
// rebuilds its copy for it, and still stores deltas against the previous version.
func TestGroupDamagedOwnedList(t *testing.T) {
	series := groupSeries(t, 2)
	gs := newGroupStore(t, "g", 4)
	gs.writeParts(t, 1, series[0])
	if _, err := gs.pub.PublishGroup("g", 1, 4); err != nil {
		t.Fatal(err)
	}
	cache := gs.ranks[2].cache.dir
	if err := gs.ranks[2].Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, ownedFileName), []byte(`["model-00003-of`), 0o600); err != nil {
		t.Fatal(err)
	}
	var log logLines
	s, err := OpenRank(gs.root, Rank{Group: "g", Rank: 2, Ranks: 4}, Options{CacheDir: cache, Logger: logtest.New(log.logf)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	gs.ranks[2] = s
	if !log.has("list of owned files") || len(s.groups.rank.own) != 0 {
		t.Fatalf("a damaged list of owned files: owns %v; log:\n%s", s.groups.rank.own, &log)
	}
	files := series[1]
	shard := "model-00003-of-00004.safetensors"
	info, err := writePart(s, 2, files, func(n string) bool { return n == shard })
	if err != nil {
		t.Fatal(err)
	}
	if info.ObjectBytes*10 > int64(len(files[shard])) {
		t.Fatalf("the restarted rank stored %d bytes for a %d-byte shard: not deltas", info.ObjectBytes, len(files[shard]))
	}
	for _, r := range []int{0, 1, 3} {
		writeOK(t, gs.ranks[r], 2, files, func(n string) bool { return shardOwner(n, 4) == r })
	}
	if _, err := gs.pub.PublishGroup("g", 2, 4); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "v2", exportHashes(t, gs.pub, 2), fileHashes(files))
}
