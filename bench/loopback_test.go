package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLoopbackMount mounts the pass-through baseline in process and checks that bytes written
// through it land in the directory underneath, and that a read-only mount refuses writes.
func TestLoopbackMount(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	under, mnt := t.TempDir(), t.TempDir()
	srv, err := mountLoopback(under, mnt, false, false)
	if err != nil {
		t.Skipf("cannot mount FUSE here: %v", err)
	}
	t.Cleanup(func() { srv.Unmount() })
	data := patterned(3<<20, 5)
	if err := os.WriteFile(filepath.Join(mnt, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(under, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("bytes under the mount differ (%v)", err)
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}

	ro, err := mountLoopback(under, mnt, true, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Unmount() })
	if err := os.WriteFile(filepath.Join(mnt, "g"), data, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write on a read-only loopback mount: %v, want EROFS", err)
	}
	got, err = os.ReadFile(filepath.Join(mnt, "f"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through the read-only mount differs (%v)", err)
	}
}

func TestRunLoopbackUsage(t *testing.T) {
	var out strings.Builder
	if code := runLoopback([]string{"only-one"}, &out); code != 2 || !strings.Contains(out.String(), "usage") {
		t.Fatalf("exit %d, output %q", code, out.String())
	}
	out.Reset()
	if code := runLoopback([]string{filepath.Join(t.TempDir(), "missing"), t.TempDir()}, &out); code != 1 {
		t.Fatalf("a missing source: exit %d, output %q", code, out.String())
	}
}
