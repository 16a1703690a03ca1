package s3

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/store"
)

// A damaged manifest of the latest version used to keep new read-only mounts (a reader
// keeping a materialized copy) of an S3 store from starting until a newer version was
// sealed, and the advice printed, verify --repair, was unsupported on S3. As on a local
// store: the version is skipped with a log line, the reader starts at the newest readable
// version, and Repair moves the manifest into quarantine/ under the prefix.
func TestS3DamagedLatestManifestSkippedAndRepaired(t *testing.T) {
	srv, url := startInitialized(t)
	want := s3Versions(t, url, 3)
	loc := strings.TrimPrefix(url, "s3://weightfs-test/")
	dir := srv.ObjectDir("weightfs-test", loc)
	flipByte(t, filepath.Join(dir, "versions", store.ManifestName(3)), 40)

	r, err := Open(url, Config{}, store.Options{ReadOnly: true, Materialize: true, CacheDir: t.TempDir(), Logger: logtest.New(t.Logf)})
	if err != nil {
		t.Fatalf("a read-only reader with a materialized copy does not start: %v", err)
	}
	if v, ok := r.Latest(); !ok || v != 2 {
		t.Errorf("the reader's latest is %d, want 2 (3 is damaged)", v)
	}
	mustReadOrCorrupt(t, "reader", r, 2, want[2])
	if _, err := r.OpenFile(3, "config.json"); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "verify --repair") {
		t.Errorf("open of a file of the damaged version: %v", err)
	}
	r.Close()

	w := openTestStore(t, url, store.Options{})
	rep, err := w.RepairWith(store.RepairOptions{})
	if err != nil {
		t.Fatalf("repair of an S3 store: %v", err)
	}
	if len(rep.Quarantined) != 1 || rep.Quarantined[0] != 3 {
		t.Fatalf("repair quarantined %v, want [3]", rep.Quarantined)
	}
	if _, err := w.Verify(nil); err != nil {
		t.Fatalf("verify after the repair: %v", err)
	}
	// The number stays taken.
	if info, _ := commitTree(t, w, 0, want[2]); info.Number != 4 {
		t.Fatalf("commit after the repair: version %d, want 4", info.Number)
	}
}
