package s3

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/pack"
)

// TestS3DamagedPackIsCorrupt is TestS3DamagedObjectIsCorrupt on store format 3's layout: in
// the bucket itself, a byte of one record of a pack is flipped and another pack is deleted.
// A fresh reader's reads of what needs them fail with store.ErrCorrupt (never wrong bytes,
// never "not found"), the others read right, and Verify names the damaged object and the
// missing pack.
func TestS3DamagedPackIsCorrupt(t *testing.T) {
	srv, url := startInitialized(t)
	want := s3Versions(t, url, 3)
	dir := srv.ObjectDir("weightfs-test", strings.TrimPrefix(url, "s3://weightfs-test/"))
	packs := regularFiles(t, filepath.Join(dir, "packs"))
	if len(packs) < 2 {
		t.Fatalf("%d packs in the bucket, want one per version", len(packs))
	}
	if _, err := os.Lstat(filepath.Join(dir, "objects")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("loose objects in the bucket of a format-3 store: %v", err)
	}
	entriesOf := func(p string) []pack.Entry {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		entries, _, err := pack.ReadTrailer(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		return entries
	}
	// A flipped byte in the middle of one record: that object alone is damaged.
	rec := entriesOf(packs[0])[0]
	flipByte(t, packs[0], rec.Offset+rec.Length/2)
	damaged := store.ID(rec.ID).String()
	// A deleted pack: every object in it is gone.
	gone := filepath.Base(packs[1])
	if err := os.Remove(packs[1]); err != nil {
		t.Fatal(err)
	}

	r := openTestStore(t, url, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	rep, err := r.Verify(nil)
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("verify of a store with a damaged and a missing pack: %v (%v)", err, rep.Damaged)
	}
	report := fmt.Sprint(err, rep.Damaged, rep.Packs)
	if !strings.Contains(report, damaged) || !strings.Contains(report, filepath.Base(packs[0])) {
		t.Errorf("verify does not name the damaged object %s and its pack: %s", damaged[:12], report)
	}
	if !strings.Contains(report, gone) {
		t.Errorf("verify does not name the missing pack %s: %s", gone[:12], report)
	}
	corrupt := 0
	for v, files := range want {
		corrupt += mustReadOrCorrupt(t, "damaged packs", r, v, files)
	}
	t.Logf("%d files failed with store.ErrCorrupt; verify: %s", corrupt, report)
	if corrupt == 0 {
		t.Errorf("every file read right with a damaged record and a missing pack")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
