package s3

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/store"
)

// objectNames is the set of object file names in the bucket directory dir.
func objectNames(t *testing.T, dir, sub string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range regularFiles(t, filepath.Join(dir, sub)) {
		out[filepath.Base(p)] = p
	}
	return out
}

// mustReadOrCorrupt reads every file of version v through s: each read gives the right bytes
// or fails with store.ErrCorrupt, never other bytes and never another error.
func mustReadOrCorrupt(t *testing.T, what string, s *store.Store, v uint64, files map[string][]byte) (corrupt int) {
	t.Helper()
	for p, b := range files {
		f, err := s.OpenFile(v, p)
		var got []byte
		if err == nil {
			got = make([]byte, f.Size())
			_, err = f.ReadAt(got, 0)
			f.Close()
		}
		switch {
		case err == nil && string(got) != string(b):
			t.Errorf("%s: v%d %s: wrong bytes", what, v, p)
		case err != nil && !errors.Is(err, store.ErrCorrupt):
			t.Errorf("%s: v%d %s: %v, want store.ErrCorrupt", what, v, p, err)
		case err != nil:
			corrupt++
		}
	}
	return corrupt
}

// TestS3PollManifestWithoutObjects: a manifest appears in the bucket whose new objects are not
// there (deleted after the seal, as a broken copy or a lifecycle rule would). A polling reader
// moves on (a missing object does not come back with retries, and must not hold the reader at
// its version for ever) and serves no other bytes for that version: its reads fail with
// ErrCorrupt; the other versions read right. A reader that opens the store then opens (it
// used to fail with the 404 of the prefetch, "not found", and serve nothing) and reads the
// same way. On store format 2's layout (loose objects: the new objects are removed) and on
// format 3's (packs: the version's new pack is removed).
func TestS3PollManifestWithoutObjects(t *testing.T) {
	t.Run("loose", func(t *testing.T) {
		t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it removes loose object files in the bucket (store format 2's layout)
		pollManifestWithoutObjects(t, "objects")
	})
	t.Run("packs", func(t *testing.T) { pollManifestWithoutObjects(t, "packs") })
}

// pollManifestWithoutObjects is TestS3PollManifestWithoutObjects; the files version 3 adds
// under sub (objects or packs) in the bucket are removed.
func pollManifestWithoutObjects(t *testing.T, sub string) {
	srv, url := startInitialized(t)
	dir := srv.ObjectDir("weightfs-test", strings.TrimPrefix(url, "s3://weightfs-test/"))
	w := openTestStore(t, url, store.Options{})
	want, m := commitVersions(t, w, 2)
	r := openPollingReader(t, url, time.Second, "open")
	if _, err := r.Poll(); err != nil {
		t.Fatal(err)
	}
	readAllVersions(t, "before", r, want)
	before := objectNames(t, dir, sub)
	m.step()
	want3 := m.files(t)
	commitTree(t, w, 3, want3)
	w.Close()
	removed := 0
	for name, p := range objectNames(t, dir, sub) {
		if _, ok := before[name]; !ok {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		t.Fatal("version 3 added no objects")
	}
	for i := range 3 {
		_, err := r.Poll()
		t.Logf("poll %d: %v", i, err)
	}
	latest, _ := r.Latest()
	t.Logf("the reader's latest after polls: v%d, versions %v", latest, r.Versions())
	readAllVersions(t, "after", r, want)
	listed3 := false
	for _, vi := range r.Versions() {
		listed3 = listed3 || vi.Number == 3
	}
	if latest != 3 || !listed3 {
		t.Errorf("after polls the reader's latest is v%d, want v3 (damaged, not hidden)", latest)
	}
	{
		if n := mustReadOrCorrupt(t, "v3 without its objects", r, 3, want3); n == 0 {
			t.Errorf("v3 without its %d new objects read whole", removed)
		}
	}

	// A reader that opens the store now finds v3 as its latest: its reads of v3 fail with
	// ErrCorrupt (a missing object is damage, never "not found"), the others read right.
	r2 := openPollingReader(t, url, time.Second, "open of a store whose latest version lacks objects")
	readAllVersions(t, "fresh reader", r2, want)
	if n := mustReadOrCorrupt(t, "fresh reader", r2, 3, want3); n == 0 {
		t.Errorf("fresh reader: v3 without its %d new objects read whole", removed)
	}
}

// TestS3ZeroLengthObjects: objects, a manifest and the gc record replaced in the bucket by
// zero-length objects (PUT through S3, as a broken copy tool would): a fresh reader opens,
// reads what needs a damaged object or manifest fail with ErrCorrupt (never other bytes,
// never "not found"), the others read right, and Verify names the damage. On store format
// 2's layout (loose objects emptied) and on format 3's (packs emptied).
func TestS3ZeroLengthObjects(t *testing.T) {
	t.Run("loose", func(t *testing.T) {
		t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it empties loose object files in the bucket (store format 2's layout)
		zeroLengthObjects(t, "objects")
	})
	t.Run("packs", func(t *testing.T) { zeroLengthObjects(t, "packs") })
}

// zeroLengthObjects is TestS3ZeroLengthObjects; two of the files under sub (objects or packs)
// in the bucket are emptied.
func zeroLengthObjects(t *testing.T, sub string) {
	srv, url := startInitialized(t)
	dir := srv.ObjectDir("weightfs-test", strings.TrimPrefix(url, "s3://weightfs-test/"))
	want := s3Versions(t, url, 3)
	cl, err := setup(url, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(rel string) {
		t.Helper()
		if _, err := cl.putBytes(ctx, cl.loc.key(rel), nil, putCond{}); err != nil {
			t.Fatal(err)
		}
	}
	objs := regularFiles(t, filepath.Join(dir, sub))
	for _, p := range objs[:2] {
		rel, _ := filepath.Rel(dir, p)
		put(filepath.ToSlash(rel))
	}
	put("versions/" + store.ManifestName(2))
	put(store.GCRecordName)

	r := openPollingReader(t, url, time.Second, "open with zero-length objects in the bucket")
	corrupt := 0
	for v, files := range want {
		corrupt += mustReadOrCorrupt(t, "zero-length", r, v, files)
	}
	if corrupt == 0 {
		t.Error("no read failed with two objects and a manifest zero-length")
	}
	rep, err := r.Verify(nil)
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("verify with zero-length objects: %v", err)
	}
	report := err.Error() + fmt.Sprint(rep.Damaged)
	for _, p := range objs[:2] {
		if !strings.Contains(report, filepath.Base(p)) {
			t.Errorf("verify does not name the zero-length object %s: %s", filepath.Base(p)[:12], report)
		}
	}
	if !strings.Contains(report, "version 2") {
		t.Errorf("verify does not name version 2 (zero-length manifest): %s", report)
	}
}

// TestS3ReaderSurvivesOutage: the S3 server stops while a reader polls and a new version
// waits in the bucket. Polls fail (after the retry time, no hang) and the reader stays at its
// version, whose files read right from what it holds; when the server is back the next poll
// moves to the new version and every version reads right.
func TestS3ReaderSurvivesOutage(t *testing.T) {
	srv, url := startInitialized(t)
	w := openTestStore(t, url, store.Options{})
	want, m := commitVersions(t, w, 2)
	r := openPollingReader(t, url, 500*time.Millisecond, "open")
	readAllVersions(t, "before the outage", r, want)
	m.step()
	want[3] = m.files(t)
	commitTree(t, w, 3, want[3])
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	for i := range 2 {
		// A poll gives up when the server is down; it must return (how fast is a matter of
		// the machine's load, not asserted), so the wait fails only on a poll that hangs.
		polled := make(chan error, 1)
		go func() { _, err := r.Poll(); polled <- err }()
		var err error
		select {
		case err = <-polled:
		case <-time.After(5 * time.Minute):
			t.Fatalf("poll %d while the server is down never returned", i)
		}
		if err == nil {
			t.Fatalf("poll %d while the server is down succeeded", i)
		}
		if errors.Is(err, os.ErrNotExist) {
			t.Fatalf("poll %d while the server is down: %v, a 'not found'", i, err)
		}
	}
	if latest, _ := r.Latest(); latest != 2 {
		t.Fatalf("during the outage the reader's latest is v%d, want v2", latest)
	}
	for p, b := range want[2] {
		mustEqualBytes(t, "v2 during the outage: "+p, readWhole(t, r, 2, p), b)
	}

	srv.Start()
	if _, err := r.Poll(); err != nil {
		t.Fatalf("poll after the server is back: %v", err)
	}
	if latest, _ := r.Latest(); latest != 3 {
		t.Fatalf("after the outage the reader's latest is v%d, want v3", latest)
	}
	readAllVersions(t, "after the outage", r, want)
	if _, err := r.Verify(nil); err != nil {
		t.Fatalf("verify after the outage: %v", err)
	}
}

// TestS3PollForgedManifest: a copy of the newest manifest appears under the next version's
// name while a reader polls (a forged or misplaced manifest): the reader serves no files of
// that version as if they were another's (its reads fail with ErrCorrupt, or it does not show
// it), the real versions read right, and Verify names the forged one.
func TestS3PollForgedManifest(t *testing.T) {
	_, url := startInitialized(t)
	want := s3Versions(t, url, 3)
	r := openPollingReader(t, url, time.Second, "open")
	if _, err := r.Poll(); err != nil {
		t.Fatal(err)
	}
	cl, err := setup(url, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data, _, err := cl.getBytes(ctx, cl.loc.key("versions/"+store.ManifestName(3)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.putBytes(ctx, cl.loc.key("versions/"+store.ManifestName(4)), data, putCond{ifNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	// The hint moved too, so that the reader lists now, not at its next periodic listing.
	if _, err := cl.putBytes(ctx, cl.loc.key(hintKey), encodeHint(changeHint{Latest: 4, Written: 1}), putCond{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		res, err := r.Poll()
		t.Logf("poll: %+v %v", res, err)
	}
	readAllVersions(t, "after a forged v4", r, want)
	for p := range want[3] {
		if _, err := r.OpenFile(4, p); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("v4 %s (v3's manifest under v4's name): %v, want store.ErrCorrupt", p, err)
		}
	}
	if _, err := r.Verify(nil); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "version 4") {
		t.Errorf("verify with v3's manifest as v4's: %v, want damage naming version 4", err)
	}
}

// TestS3PollHintDeleted: the change hint is deleted from the bucket (a lifecycle rule, a
// cleanup by hand) while a reader polls: polls do not fail and do not hide versions, and the
// writer's next seal is seen.
func TestS3PollHintDeleted(t *testing.T) {
	_, url := startInitialized(t)
	w := openTestStore(t, url, store.Options{})
	m := newTestModel(4, 20_000)
	commitTree(t, w, 1, m.files(t))
	r := openTestStore(t, url, store.Options{ReadOnly: true, Materialize: true})
	if _, err := r.Poll(); err != nil {
		t.Fatal(err)
	}
	wb := w.Backend().(*Backend)
	if err := wb.c.remove(wb.ctx, wb.c.loc.key(hintKey)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if res, err := r.Poll(); err != nil {
			t.Fatalf("poll %d with the hint deleted: %+v, %v", i, res, err)
		}
		if latest, _ := r.Latest(); latest != 1 {
			t.Fatalf("poll %d with the hint deleted: latest v%d, want v1", i, latest)
		}
	}
	m.step()
	commitTree(t, w, 2, m.files(t))
	if _, err := r.Poll(); err != nil {
		t.Fatal(err)
	}
	if latest, _ := r.Latest(); latest != 2 {
		t.Fatalf("poll after a seal (hint deleted before): latest v%d, want v2", latest)
	}
}

// openPollingReader opens a read-only reader of the store at url that keeps a copy, as a
// read-only mount does, retrying the backend for retry; what names the open in a failure. The
// reader is closed when the test ends.
func openPollingReader(t *testing.T, url string, retry time.Duration, what string) *store.Store {
	t.Helper()
	r, err := Open(url, Config{RetryFor: retry}, store.Options{ReadOnly: true, Materialize: true,
		CacheDir: t.TempDir(), Logger: logtest.New(t.Logf)})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
