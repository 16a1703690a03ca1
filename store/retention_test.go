package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/testfiles"
)

// storeFiles hashes every file of the store but its cache: what a dry run must not change.
func storeFiles(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel == "cache" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// objectFileBytes sums the sizes of the files under STORE/objects, as du would see them.
var objectFileBytes = testfiles.ObjectBytes

func numbers(vs []VersionInfo) []uint64 {
	var out []uint64
	for _, v := range vs {
		out = append(out, v.Number)
	}
	return out
}

func commitModel(t *testing.T, s *Store, n int) map[uint64]map[string]string {
	t.Helper()
	want := map[uint64]map[string]string{}
	for i, files := range modelVersions(t, n, 17) {
		_, dir := commitTree(t, s, uint64(i+1), files)
		want[uint64(i+1)] = treeHashes(t, dir)
	}
	return want
}

func TestGCDryRunPredictsAndChangesNothing(t *testing.T) {
	for _, keep := range []int{1, 3, 8} {
		t.Run(fmt.Sprint("keep ", keep), func(t *testing.T) {
			s, root := newStore(t, Options{})
			want := commitModel(t, s, 8)
			before := storeFiles(t, root)
			bytesBefore := storeBytes(t, s)
			dry, err := s.GCWith(keep, GCOptions{DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if after := storeFiles(t, root); !maps2Equal(before, after) {
				t.Fatalf("a dry run changed the store")
			}
			if len(s.Versions()) != 8 {
				t.Fatalf("a dry run dropped versions: %v", numbers(s.Versions()))
			}
			real, err := s.GCWith(keep, GCOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("dry run %+v; gc %+v", dry, real)
			if !slices.Equal(dry.Dropped, real.Dropped) || !slices.Equal(dry.Kept, real.Kept) ||
				dry.DeletedObjects != real.DeletedObjects || dry.DeletedBytes != real.DeletedBytes ||
				dry.Reanchored != real.Reanchored {
				t.Fatalf("the dry run predicted %+v, gc did %+v", dry, real)
			}
			if dry.ReanchorBytes < real.ReanchorBytes {
				t.Fatalf("the dry run's re-anchor bytes %d are not an upper bound of gc's %d", dry.ReanchorBytes, real.ReanchorBytes)
			}
			if got := bytesBefore - storeBytes(t, s); got != real.FreedBytes() {
				t.Fatalf("gc says it freed %d bytes; the store shrank by %d", real.FreedBytes(), got)
			}
			for _, v := range real.Kept {
				sameTree(t, fmt.Sprintf("v%d", v), exportHashes(t, s, v), want[v])
			}
		})
	}
}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestGCKeepEvery(t *testing.T) {
	s, _ := newStore(t, Options{})
	want := commitModel(t, s, 10)
	st, err := s.GCWith(2, GCOptions{KeepEvery: 4})
	if err != nil {
		t.Fatal(err)
	}
	if got := numbers(s.Versions()); !slices.Equal(got, []uint64{4, 8, 9, 10}) {
		t.Fatalf("kept %v, want [4 8 9 10] (%+v)", got, st)
	}
	for _, v := range []uint64{4, 8, 9, 10} {
		sameTree(t, fmt.Sprintf("v%d", v), exportHashes(t, s, v), want[v])
	}
	if _, err := s.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

func TestGCKeepsPinnedVersions(t *testing.T) {
	s, root := newStore(t, Options{})
	want := commitModel(t, s, 6)
	r := openStore(t, root, Options{ReadOnly: true})
	pin, err := r.Pin(2)
	if err != nil {
		t.Fatal(err)
	}
	// A pin that expired, and one of a dead reader for version 3.
	dead := pinRecord{Format: pinFormat, Version: 3, Expires: time.Now().Add(-time.Hour).UTC(), Host: "h", PID: 1}
	writePinFile(t, root, "dead.json", dead)
	st, err := s.GC(1)
	if err != nil {
		t.Fatal(err)
	}
	if got := numbers(s.Versions()); !slices.Equal(got, []uint64{2, 6}) || !slices.Equal(st.Pinned, []uint64{2}) {
		t.Fatalf("gc --keep-last 1 with v2 pinned kept %v (pinned %v)", got, st.Pinned)
	}
	sameTree(t, "pinned v2 through the reader", exportHashes(t, r, 2), want[2])
	if _, err := os.Stat(filepath.Join(root, pinDir, "dead.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("gc left the long-expired pin: %v", err)
	}
	if err := pin.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(1); err != nil {
		t.Fatal(err)
	}
	if got := numbers(s.Versions()); !slices.Equal(got, []uint64{6}) {
		t.Fatalf("after the pin went, gc kept %v", got)
	}
	// A pin of an unknown format stops gc: what it protects is unknown.
	writePinFile(t, root, "future.json", pinRecord{Format: "weightfs-pin-9", Version: 6, Expires: time.Now().Add(time.Hour)})
	if _, err := s.GC(1); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("gc with a pin of an unknown format: %v", err)
	}
}

func writePinFile(t *testing.T, root, name string, rec pinRecord) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, pinDir), 0o777); err != nil {
		t.Fatal(err)
	}
	b := fmt.Sprintf(`{"format":%q,"version":%d,"expires":%q,"host":%q,"pid":%d}`,
		rec.Format, rec.Version, rec.Expires.Format(time.RFC3339), rec.Host, rec.PID)
	if err := os.WriteFile(filepath.Join(root, pinDir, name), []byte(b), 0o666); err != nil {
		t.Fatal(err)
	}
}

func TestUsageTotalIsObjectFiles(t *testing.T) {
	s, root := newLooseStore(t, Options{})
	commitModel(t, s, 8)
	if _, err := s.GC(3); err != nil {
		t.Fatal(err)
	}
	u, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	files := objectFileBytes(t, root)
	var own, commitStored int64
	for _, vu := range u.Versions {
		own += vu.OwnBytes
	}
	for _, v := range s.Versions() {
		commitStored += v.StoredBytes
	}
	t.Logf("objects %d bytes; usage %+v; stored at commit %d", files, u, commitStored)
	if u.Total != files || own+u.Unreferenced != u.Total {
		t.Fatalf("usage total %d (own %d + unreferenced %d); object files %d bytes", u.Total, own, u.Unreferenced, files)
	}
	if u.Unreferenced != 0 {
		t.Fatalf("%d unreferenced bytes after gc", u.Unreferenced)
	}
	if len(u.Versions) != 3 || u.Versions[0].OwnBytes < u.Versions[1].OwnBytes {
		t.Fatalf("the oldest kept version (the anchor) does not hold the most: %+v", u.Versions)
	}
}

func TestRetentionAfterSeal(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	s, root := newLooseStore(t, Options{Retention: Retention{KeepLast: 3, KeepEvery: 5},
		Logger: logtest.New(func(f string, a ...any) { mu.Lock(); logs = append(logs, fmt.Sprintf(f, a...)); mu.Unlock() })})
	want := commitModel(t, s, 10)
	s.collector.ret.idle()
	// Retention keeps at least the newest 3 and the milestones; it may keep more, while
	// dropping them would rewrite more than it frees (TestRetentionCostsWhatItFrees).
	got := numbers(s.Versions())
	for _, v := range got {
		sameTree(t, fmt.Sprintf("v%d kept by retention", v), exportHashes(t, s, v), want[v])
	}
	for _, v := range []uint64{5, 8, 9, 10} {
		if !slices.Contains(got, v) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("retention kept %v, not v%d; log:\n%s", got, v, strings.Join(logs, "\n"))
		}
	}
	// The same policy, whatever it costs (gc by hand), keeps exactly those.
	if _, err := s.GCWith(3, GCOptions{KeepEvery: 5}); err != nil {
		t.Fatal(err)
	}
	s.collector.ret.wait()
	if got := numbers(s.Versions()); !slices.Equal(got, []uint64{5, 8, 9, 10}) {
		t.Fatalf("gc --keep-last 3 --keep-every 5 kept %v, want [5 8 9 10]", got)
	}
	for _, v := range []uint64{5, 8, 9, 10} {
		sameTree(t, fmt.Sprintf("v%d", v), exportHashes(t, s, v), want[v])
	}
	u, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if u.Total != objectFileBytes(t, root) || u.Unreferenced != 0 {
		t.Fatalf("usage %+v; object files %d bytes", u, objectFileBytes(t, root))
	}
}

// An open writer takes delta bases from the latest version when it opened: gc keeps that
// version while the writer is open, even when later seals make it old.
func TestGCKeepsAnOpenWritersBases(t *testing.T) {
	s, _ := newStore(t, Options{})
	versions := modelVersions(t, 9, 23)
	for i := 0; i < 6; i++ {
		commitTree(t, s, uint64(i+1), versions[i])
	}
	w, err := s.NewVersion(9)
	if err != nil {
		t.Fatal(err)
	}
	commitTree(t, s, 7, versions[6])
	commitTree(t, s, 8, versions[7])
	if _, err := s.GC(1); err != nil {
		t.Fatal(err)
	}
	if got := numbers(s.Versions()); !slices.Equal(got, []uint64{6, 7, 8}) {
		t.Fatalf("gc with a writer open since v6 kept %v", got)
	}
	dir := writeTree(t, t.TempDir(), versions[8])
	for name, b := range versions[8] {
		if err := w.AddFile(name, bytes.NewReader(b), int64(len(b)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "v9", exportHashes(t, s, 9), treeHashes(t, dir))
	if _, err := s.GC(1); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "v9 after gc", exportHashes(t, s, 9), treeHashes(t, dir))
}

// A reader without a pin that serves a version gc then removes gets ErrVersionRemoved (no
// such version, a log line naming gc), never ErrCorrupt: nothing is damaged.
func TestReadOfAVersionGCRemovedIsNotDamage(t *testing.T) {
	s, root := newLooseStore(t, Options{})
	want := commitModel(t, s, 4)
	log := &logLines{t: t}
	r := openLoose(t, root, Options{ReadOnly: true, Logger: logtest.New(log.logf)})
	f, err := r.OpenFile(2, "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(1); err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(make([]byte, 4096), f.Size()/2)
	if !errors.Is(err, ErrVersionRemoved) || !errors.Is(err, ErrNoSuchVersion) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of a version gc removed: %v", err)
	}
	if !log.has("version 2 was removed by gc") {
		t.Fatalf("no log line names gc:\n%s", log)
	}
	sameTree(t, "v4", exportHashes(t, r, 4), want[4])
}

// A reader that cached the object headers of a delta chain reads on after a gc (in the
// writer's process: retention) re-anchored the chain and deleted its old bases: the stale
// plan is dropped and the page rebuilt from fresh headers, never "object missing".
func TestReaderReadsOnAfterGCReanchors(t *testing.T) {
	s, root := newStore(t, Options{})
	versions := modelVersions(t, 6, 29)
	commitTree(t, s, 1, versions[0])
	// No copy, and a page cache too small to keep pages: reads plan from cached headers.
	r := openStore(t, root, Options{ReadOnly: true, CacheBytes: 1})
	for v := 2; v <= 4; v++ {
		commitTree(t, s, uint64(v), versions[v-1])
		if err := r.Refresh(); err != nil {
			t.Fatal(err)
		}
		// Reading each version caches the headers of its chains.
		mustEqualBytes(t, fmt.Sprint("v", v), readWhole(t, r, uint64(v), "model.safetensors"), versions[v-1]["model.safetensors"])
	}
	commitTree(t, s, 5, versions[4])
	// gc keeps 3..5: v3's deltas become whole copies, the objects of v1 and v2 go.
	if _, err := s.GC(3); err != nil {
		t.Fatal(err)
	}
	for _, v := range []uint64{3, 4} {
		f, err := r.OpenFile(v, "model.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4096)
		for _, off := range []int64{f.Size() - 300_000, f.Size() / 3} {
			if _, err := f.ReadAt(b, off); err != nil {
				t.Fatalf("read v%d at %d after gc: %v", v, off, err)
			}
		}
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "v5 after gc", readWhole(t, r, 5, "model.safetensors"), versions[4]["model.safetensors"])
}

// TestVerifyOfAReaderAfterGC: a reader that read the versions before a writer's gc re-anchored
// their objects verifies clean after its Refresh. Its remembered object headers (deltas,
// until gc rewrote them whole) must not make a dropped version look lost.
func TestVerifyOfAReaderAfterGC(t *testing.T) {
	s, root := newStore(t, Options{})
	want := commitModel(t, s, 4)
	r := openStore(t, root, Options{ReadOnly: true})
	for v := uint64(1); v <= 4; v++ {
		sameTree(t, fmt.Sprintf("v%d before gc", v), exportHashes(t, r, v), want[v])
	}
	st, err := s.GC(1)
	if err != nil {
		t.Fatal(err)
	}
	if st.Reanchored == 0 {
		t.Fatalf("gc re-anchored nothing (%+v): the test needs a rewritten delta", st)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Verify(nil); err != nil {
		t.Fatalf("verify of a reader after gc: %v", err)
	}
	sameTree(t, "v4 after gc", exportHashes(t, r, 4), want[4])
}

// A version whose manifest and objects vanish while a reader serves it, with no gc that
// dropped it (the gc record does not hold it), is damage: ErrCorrupt (EIO), never
// ErrVersionRemoved (ENOENT), and no log line blames gc.
func TestReadOfAVersionLostNotByGCIsDamage(t *testing.T) {
	s, root := newLooseStore(t, Options{})
	commitModel(t, s, 4)
	log := &logLines{t: t}
	r := openLoose(t, root, Options{ReadOnly: true, Logger: logtest.New(log.logf)})
	f, err := r.OpenFile(2, "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	ver, err := s.versions.sealedVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	expectDamage(s)
	expectDamage(r)
	lb := s.be.given.(*localBackend)
	for _, tn := range ver.files["model.safetensors"].Tensors {
		if err := os.Remove(lb.ObjectPath(tn.ID)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if err := os.Remove(lb.ManifestPath(2)); err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(make([]byte, 4096), f.Size()/2)
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersionRemoved) {
		t.Fatalf("read of a version lost without gc: %v, want ErrCorrupt", err)
	}
	if log.has("removed by gc") {
		t.Fatalf("a log line blames gc for a lost version:\n%s", log)
	}
}

// changingModel is n versions of a model of one 2.8 MB tensor of which a fraction of the
// elements change at each version.
