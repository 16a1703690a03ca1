package fs

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// TestPatchFromDamagedDeltaIsEIO: the one-step patch is made from the delta objects; with
// them damaged on disk, reading the patch through a read-only mount is EIO, never a wrong patch.
func TestPatchFromDamagedDeltaIsEIO(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it reads loose object files (store format 2's layout)
	st := viewStore(t)
	root := st.Root()
	st.Close()
	damaged := 0
	err := filepath.WalkDir(filepath.Join(root, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if len(b) < 100 || b[6] != 2 { // not a delta object (docs/format.md Part I §3.1)
			return nil
		}
		b[len(b)-6] ^= 0x01 // a byte of the delta section
		os.Chmod(p, 0o644)
		damaged++
		return os.WriteFile(p, b, 0o444)
	})
	if err != nil || damaged == 0 {
		t.Fatalf("damaged %d delta objects: %v", damaged, err)
	}
	ro, err := store.Open(root, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	mnt, _ := mountTest(t, FromStore(ro), Options{ReadOnly: true})
	_, err = os.ReadFile(filepath.Join(mnt, "patches", PatchName(2)))
	wantErrno(t, "read the patch of a version whose delta object is damaged", err, syscall.EIO)
}
