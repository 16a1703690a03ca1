package tests

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMountCorruptObjectIsEIO damages every object of a sealed version and reads the version
// through a fresh read-only mount: each read fails with EIO or returns the exact bytes, never
// wrong ones, and the damage is noticed.
func TestMountCorruptObjectIsEIO(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it reads loose object files (store format 2's layout)
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	want := genCheckpoints(t, work, 300_000, 1)
	rw, ro := rwAndROMountPoints(t, work)
	d := startMount(t, storeDir, rw)
	run(t, "cp", "-r", srcDir(work, 1), versionDir(rw, 1))
	run(t, "touch", filepath.Join(versionDir(rw, 1), "DONE"))
	d.stop()

	damaged := 0
	err := filepath.WalkDir(filepath.Join(storeDir, "objects"), func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		data[len(data)/2] ^= 0x40
		damaged++
		return os.WriteFile(p, data, 0o644)
	})
	if err != nil || damaged == 0 {
		t.Fatalf("damage objects: %d damaged, %v", damaged, err)
	}

	startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"))
	eio := 0
	for name, sum := range want[1] {
		p := filepath.Join(versionDir(ro, 1), name)
		_, err := os.ReadFile(p)
		switch {
		case errors.Is(err, syscall.EIO):
			eio++
		case err != nil:
			t.Errorf("%s: %v, want EIO", name, err)
		default:
			if got := sha256sumTree(t, filepath.Dir(p))[name]; got != sum {
				t.Errorf("%s: read %s, want %s: wrong bytes from a damaged store", name, got, sum)
			}
		}
	}
	if eio == 0 {
		t.Error("no read failed although every object is damaged")
	}
}
