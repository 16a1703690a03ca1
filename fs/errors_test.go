package fs

import (
	"bytes"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// TestToErrno pins the order of the errno table: damage (store.ErrCorrupt) is EIO even when
// the chain also holds the OS's errno of a missing file, which would otherwise tell the
// reader that a file it just listed does not exist.
func TestToErrno(t *testing.T) {
	missing := &iofs.PathError{Op: "open", Path: "objects/ab/abcd", Err: syscall.ENOENT}
	tests := []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"nil", nil, 0},
		{"plain errno", syscall.ENOSPC, syscall.ENOSPC},
		{"wrapped errno", fmt.Errorf("write staging: %w", &iofs.PathError{Op: "write", Path: "f", Err: syscall.EDQUOT}), syscall.EDQUOT},
		{"corrupt", fmt.Errorf("object x: %w", store.ErrCorrupt), syscall.EIO},
		{"missing object", fmt.Errorf("object x is missing: %w (%w)", store.ErrCorrupt, missing), syscall.EIO},
		{"missing object, errno first", fmt.Errorf("%w: %w", missing, store.ErrCorrupt), syscall.EIO},
		{"bad path", fmt.Errorf("add: %w", store.ErrBadPath), syscall.EINVAL},
		{"name too long", fmt.Errorf("add: %w", store.ErrNameTooLong), syscall.ENAMETOOLONG},
		{"version out of range", fmt.Errorf("open: %w", store.ErrVersionOutOfRange), syscall.EINVAL},
		{"no such file", store.ErrNoSuchFile, syscall.ENOENT},
		{"anything else", errors.New("boom"), syscall.EIO},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := toErrno(tc.err); got != tc.want {
				t.Errorf("toErrno(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestMissingObjectReadsEIO deletes every object file of a committed version and reads the
// file through a read-only mount of the real store: the entry is still listed and stat
// works (the manifest is intact), and the read fails with EIO, never ENOENT.
func TestMissingObjectReadsEIO(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it reads loose object files (store format 2's layout)
	canMount(t)
	root := filepath.Join(t.TempDir(), "store")
	if err := store.Init(root); err != nil {
		t.Fatal(err)
	}
	w1 := pattern(14, 300000)
	func() {
		s, err := store.Open(root, store.Options{CacheDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		w, err := s.NewVersion(1)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddFile("w.bin", bytes.NewReader(w1), int64(len(w1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Seal(); err != nil {
			t.Fatal(err)
		}
	}()
	removed := 0
	err := filepath.WalkDir(filepath.Join(root, "objects"), func(p string, d iofs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			removed++
			return os.Remove(p)
		}
		return err
	})
	if err != nil || removed == 0 {
		t.Fatalf("remove the objects: %d removed, %v", removed, err)
	}

	s, err := store.Open(root, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	mnt, _ := mountTest(t, FromStore(s), Options{ReadOnly: true})
	t.Cleanup(func() { s.Close() })
	ver := filepath.Join(mnt, "weight_v000001")
	if got := listDir(t, ver); got != "w.bin" {
		t.Fatalf("ls: %q", got)
	}
	if fi, err := os.Stat(filepath.Join(ver, "w.bin")); err != nil || fi.Size() != int64(len(w1)) {
		t.Fatalf("stat: %v, %v", fi, err)
	}
	_, err = os.ReadFile(filepath.Join(ver, "w.bin"))
	wantErrno(t, "read of a file whose object is missing", err, syscall.EIO)
}
