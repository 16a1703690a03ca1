package fs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// TestOpenFilesBypassPageCache: the bytes written to a file of an open version go to the
// daemon without being kept in the page cache of the FUSE file (openFileFlags), and the file
// reads back before and after the seal. (Maps of such files are tested in tests/, from a
// process other than the daemon: a page fault on a map of this process's own mount can stop
// the Go runtime's world for good.)
func TestOpenFilesBypassPageCache(t *testing.T) {
	b := newFakeStore()
	mnt, srv := mountTest(t, b, Options{})
	if srv.fuse.KernelSettings().Flags64()&fuse.CAP_DIRECT_IO_ALLOW_MMAP == 0 {
		t.Skip("the kernel does not let direct-I/O files be mapped shared (before 6.6): open files keep the page cache")
	}
	v1 := filepath.Join(mnt, "weight_v000001")
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	model := pattern(7, 4<<20+123)
	p := filepath.Join(v1, "model.bin")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off := 0; off < len(model); off += 1 << 20 {
		if _, err := f.Write(model[off:min(off+1<<20, len(model))]); err != nil {
			t.Fatal(err)
		}
	}
	var st unix.Cachestat_t
	r := unix.CachestatRange{Off: 0, Len: uint64(len(model))}
	switch err := unix.Cachestat(uint(f.Fd()), &r, &st, 0); {
	case errors.Is(err, syscall.ENOSYS):
		t.Log("the kernel has no cachestat(2): page cache not checked")
	case err != nil:
		t.Fatalf("cachestat: %v", err)
	case st.Cache != 0:
		t.Errorf("after writing %d bytes, the page cache of the FUSE file holds %d pages, want 0", len(model), st.Cache)
	}
	got := make([]byte, len(model))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read back before the seal: %v, equal %v", err, bytes.Equal(got, model))
	}

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	mustSeal(t, v1)
	if stored, ok := b.file(1, "model.bin"); !ok || !bytes.Equal(stored, model) {
		t.Errorf("store: model.bin has %d bytes (found %v), want the %d bytes written", len(stored), ok, len(model))
	}
	if read, err := os.ReadFile(p); err != nil || !bytes.Equal(read, model) {
		t.Errorf("sealed: read %d bytes, %v; want the %d bytes written", len(read), err, len(model))
	}
}

// TestOpenFileFlags: direct I/O only where the kernel lets direct-I/O files be mapped shared.
func TestOpenFileFlags(t *testing.T) {
	for _, tc := range []struct {
		kernel uint64
		want   uint32
	}{
		{0, 0},
		{fuse.CAP_ASYNC_READ | fuse.CAP_BIG_WRITES, 0},
		{fuse.CAP_DIRECT_IO_ALLOW_MMAP, fuse.FOPEN_DIRECT_IO},
		{fuse.CAP_DIRECT_IO_ALLOW_MMAP | fuse.CAP_ASYNC_READ, fuse.FOPEN_DIRECT_IO},
	} {
		if got := openFileFlags(tc.kernel); got != tc.want {
			t.Errorf("openFileFlags(%#x) = %#x, want %#x", tc.kernel, got, tc.want)
		}
	}
}
