package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMapFilesOfOpenVersion: files of an open version are opened with direct I/O (so that a
// checkpoint's bytes do not fill the page cache), and programs that write through a shared map
// still work: one changes a file written with write(2), another writes a new file only
// through a map after ftruncate. The sealed version holds what was mapped, by sha256sum and by
// a read-only map.
func TestMapFilesOfOpenVersion(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	startMount(t, storeDir, mnt)
	v1 := versionDir(mnt, 1)
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}

	written := bytes.Repeat([]byte("weights!"), 3<<17+5) // 3 MiB + 40 bytes
	writtenPath := filepath.Join(v1, "written.bin")
	if err := os.WriteFile(writtenPath, written, 0o644); err != nil {
		t.Fatal(err)
	}
	changeThroughMap(t, writtenPath, len(written), func(m []byte) {
		copy(m[1<<20+3:], "changed through a shared map")
	})
	copy(written[1<<20+3:], "changed through a shared map")

	mapped := make([]byte, 2<<20+999)
	for i := range mapped {
		mapped[i] = byte(i * 7)
	}
	mappedPath := filepath.Join(v1, "mapped.bin")
	changeThroughMap(t, mappedPath, len(mapped), func(m []byte) { copy(m, mapped) })

	run(t, "touch", filepath.Join(v1, "DONE"))
	for name, want := range map[string][]byte{"written.bin": written, "mapped.bin": mapped} {
		sum := sha256.Sum256(want)
		wantHex := hex.EncodeToString(sum[:])
		got := sha256sumTree(t, v1)[name]
		if got != wantHex {
			t.Errorf("sealed %s: sha256sum %s, want %s", name, got, wantHex)
		}
		if got := mmapSHA256(t, filepath.Join(v1, name)); got != wantHex {
			t.Errorf("sealed %s: sha256 through a map %s, want %s", name, got, wantHex)
		}
	}
}

// changeThroughMap opens p (creating it), makes it size bytes long, maps it shared and
// writable, lets change write to the map, and syncs, unmaps and closes it.
func changeThroughMap(t *testing.T, p string, size int, change func([]byte)) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("shared writable map of %s in an open version: %v", p, err)
	}
	change(m)
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		t.Errorf("msync %s: %v", p, err)
	}
	if err := syscall.Munmap(m); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s: %v", p, err)
	}
}
