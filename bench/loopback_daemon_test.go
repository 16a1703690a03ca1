package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// TestLoopbackWithoutPassthrough: the loopback's files offer the kernel passthrough, the
// -no-passthrough loopback's do not, and it still reads the bytes underneath.
func TestLoopbackWithoutPassthrough(t *testing.T) {
	under := t.TempDir()
	data := patterned(3<<20+7, 9)
	if err := os.WriteFile(filepath.Join(under, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(filepath.Join(under, "f"), syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	lf := gofs.NewLoopbackFile(fd).(*gofs.LoopbackFile)
	defer lf.Release(t.Context())
	if !hasPassthrough(lf) {
		t.Fatal("go-fuse's loopback file offers no passthrough: the baseline's note is wrong")
	}
	if hasPassthrough(&daemonReadFile{lf}) {
		t.Fatal("the -no-passthrough loopback's file offers passthrough")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	mnt := t.TempDir()
	srv, err := mountLoopback(under, mnt, true, true)
	if err != nil {
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	t.Cleanup(func() { srv.Unmount() })
	got, err := os.ReadFile(filepath.Join(mnt, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through the -no-passthrough loopback differs (%v)", err)
	}
}
