package fs

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNameTooLong is pjdfstest's ENAMETOOLONG cases on an open version of a real store: a
// name of 256 bytes (or 1024, the most FUSE passes on) is refused at create, mknod, mkdir,
// symlink, link and as the target of a rename, at the root too, while names of 255 bytes are
// taken, sealed, read back and do not keep the next version from sealing.
func TestNameTooLong(t *testing.T) {
	sm := newStreamMount(t)
	ver := filepath.Join(sm.mnt, "weight_v000001")
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	n255, n256, n1024 := strings.Repeat("a", 255), strings.Repeat("b", 256), strings.Repeat("c", 1024)
	writeFile(t, filepath.Join(ver, "f"), []byte("f"))
	if err := os.Mkdir(filepath.Join(ver, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, long := range []string{n256, n1024} {
		p := filepath.Join(ver, long)
		wantErrno(t, "create", create(p), syscall.ENAMETOOLONG)
		wantErrno(t, "mknod", unix.Mknod(p, syscall.S_IFREG|0o644, 0), syscall.ENAMETOOLONG)
		wantErrno(t, "mkdir", os.Mkdir(p, 0o755), syscall.ENAMETOOLONG)
		wantErrno(t, "symlink", os.Symlink("f", p), syscall.ENAMETOOLONG)
		wantErrno(t, "link", os.Link(filepath.Join(ver, "f"), p), syscall.ENAMETOOLONG)
		wantErrno(t, "rename a file", os.Rename(filepath.Join(ver, "f"), p), syscall.ENAMETOOLONG)
		wantErrno(t, "rename a directory", os.Rename(filepath.Join(ver, "d"), p), syscall.ENAMETOOLONG)
		wantErrno(t, "mkdir at the root", os.Mkdir(filepath.Join(sm.mnt, long), 0o755), syscall.ENAMETOOLONG)
	}
	if err := os.Mkdir(filepath.Join(sm.mnt, "staging"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "rename at the root", os.Rename(filepath.Join(sm.mnt, "staging"), filepath.Join(sm.mnt, n256)), syscall.ENAMETOOLONG)
	if got := listDir(t, ver); got != "d f" {
		t.Fatalf("after the refusals the version holds %q", got)
	}

	// 255 bytes is a name like any other, and the store keeps sealing after it.
	want := pattern(6, 5000)
	writeFile(t, filepath.Join(ver, n255), want)
	writeFile(t, filepath.Join(ver, "d", n255, "x"), []byte("x"))
	mustSeal(t, ver)
	if got, err := os.ReadFile(filepath.Join(ver, n255)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read the 255-byte name back: %d bytes, %v", len(got), err)
	}
	ver2 := filepath.Join(sm.mnt, "weight_v000002")
	if err := os.Mkdir(ver2, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ver2, n255), want)
	mustSeal(t, ver2)
	if vs := sm.store.Versions(); len(vs) != 2 {
		t.Fatalf("%d versions sealed, want 2", len(vs))
	}
}

// TestDeepPaths builds directories of 200-byte names one inside the other, through
// descriptors, until the version-relative path passes PATH_MAX (as ext4 lets one): the
// mkdirs, a create at the bottom and the rename of a directory tree there are taken, the
// version seals, and the files read back exactly through descriptors of the sealed version.
func TestDeepPaths(t *testing.T) {
	sm := newStreamMount(t)
	ver := filepath.Join(sm.mnt, "weight_v000001")
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	var fds []int
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	// descend opens the directories of a chain of depth names seg below dir.
	descend := func(dir string, seg string, depth int, mkdir bool) int {
		t.Helper()
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		for i := range depth {
			if mkdir {
				if err := unix.Mkdirat(fd, seg, 0o755); err != nil {
					t.Fatalf("mkdir at depth %d (a path of %d bytes): %v", i, (i+1)*(len(seg)+1)-1, err)
				}
			}
			if fd, err = unix.Openat(fd, seg, unix.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
				t.Fatalf("open at depth %d: %v", i, err)
			}
			fds = append(fds, fd)
		}
		return fd
	}
	seg := strings.Repeat("s", 200)
	const depth = 30 // 6029 bytes
	bottom := descend(ver, seg, depth, true)
	want := pattern(7, 70000)
	f, err := unix.Openat(bottom, "file", unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("create at a path of %d bytes: %v", depth*(len(seg)+1)+4, err)
	}
	if n, err := unix.Write(f, want); n != len(want) || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	unix.Close(f)
	// A directory holding a file two levels down, renamed into the deepest directory.
	writeFile(t, filepath.Join(ver, "t", "u", "file"), []byte("x"))
	if err := unix.Renameat(fds[0], "t", bottom, strings.Repeat("r", 255)); err != nil {
		t.Fatalf("rename a tree to the bottom: %v", err)
	}
	mustSeal(t, ver)
	if vs := sm.store.Versions(); len(vs) != 1 {
		t.Fatalf("%d versions sealed, want 1", len(vs))
	}
	bottom = descend(ver, seg, depth, false)
	for _, c := range []struct {
		name string
		want []byte
	}{{"file", want}, {strings.Repeat("r", 255) + "/u/file", []byte("x")}} {
		fd, err := unix.Openat(bottom, c.name, unix.O_RDONLY, 0)
		if err != nil {
			t.Fatalf("open %s of the sealed version: %v", c.name[:4], err)
		}
		got := make([]byte, len(c.want)+1)
		n, err := unix.Pread(fd, got, 0)
		unix.Close(fd)
		if err != nil || !bytes.Equal(got[:n], c.want) {
			t.Fatalf("read %s of the sealed version: %d bytes, %v, want %d", c.name[:4], n, err, len(c.want))
		}
	}
}

// TestNamesTheStoreRefuses creates a name the store's path check refuses (not UTF-8: the
// manifest would give back another name): create, mkdir and rename to it fail at once with
// EINVAL, instead of the seal failing later, and the version seals. A name the store holds
// as it is (a backslash, a newline) is taken, sealed and read back.
func TestNamesTheStoreRefuses(t *testing.T) {
	sm := newStreamMount(t)
	ver := filepath.Join(sm.mnt, "weight_v000001")
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ver, "f"), []byte("f"))
	bad := "a\xffb"
	wantErrno(t, "create", create(filepath.Join(ver, bad)), syscall.EINVAL)
	wantErrno(t, "mkdir", os.Mkdir(filepath.Join(ver, bad), 0o755), syscall.EINVAL)
	wantErrno(t, "rename", os.Rename(filepath.Join(ver, "f"), filepath.Join(ver, bad)), syscall.EINVAL)
	odd := "a\\b\nc"
	writeFile(t, filepath.Join(ver, odd), []byte("odd"))
	mustSeal(t, ver)
	for name, want := range map[string]string{"f": "f", odd: "odd"} {
		if got, err := os.ReadFile(filepath.Join(ver, name)); err != nil || string(got) != want {
			t.Fatalf("read %q: %q, %v", name, got, err)
		}
	}
}

// create creates p and closes it (a descriptor left open would keep the mount busy).
func create(p string) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	return f.Close()
}
