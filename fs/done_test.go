package fs

import (
	"errors"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDoneLikeTouch replays what touch(1) does to DONE: open it, dup the descriptor, close
// the first one (that close seals), set the times through the second, close it. Every step
// must succeed, and the version must be sealed after the first close.
func TestDoneLikeTouch(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	ver := filepath.Join(mnt, "weight_v000001")
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ver, "w"), []byte("weights"))
	fd, err := syscall.Open(filepath.Join(ver, doneName), syscall.O_WRONLY|syscall.O_CREAT|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fd2, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Close(fd); err != nil {
		t.Fatalf("first close (the seal): %v", err)
	}
	if len(b.Versions()) != 1 {
		t.Fatal("not sealed after the first close")
	}
	ts := []unix.Timespec{unix.NsecToTimespec(time.Now().UnixNano()), unix.NsecToTimespec(time.Now().UnixNano())}
	if err := unix.UtimesNanoAt(fd2, "", ts, unix.AT_EMPTY_PATH); err != nil {
		// Older kernels refuse AT_EMPTY_PATH for utimensat; futimens is the same request.
		if err := unix.Futimes(fd2, []unix.Timeval{{Sec: 1}, {Sec: 1}}); err != nil {
			t.Fatalf("set the times of DONE after the seal: %v", err)
		}
	}
	// Anything but the times is refused: the version is sealed.
	wantErrno(t, "fchmod DONE after the seal", unix.Fchmod(fd2, 0o600), syscall.EPERM)
	if err := syscall.Close(fd2); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if got, _ := b.file(1, "w"); string(got) != "weights" {
		t.Errorf("stored w = %q", got)
	}
	// The path now leads to the sealed version, which has no DONE.
	_, err = os.Stat(filepath.Join(ver, doneName))
	wantErrno(t, "stat DONE in the sealed version", err, syscall.ENOENT)
}

func TestPrepareMountpoint(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		wantErr bool
	}{
		{"directory", dir, false},
		{"missing", filepath.Join(dir, "nope"), true},
		{"file", file, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := prepareMountpoint(tc.path, logtest.New(t.Logf))
			if (err != nil) != tc.wantErr {
				t.Fatalf("prepareMountpoint(%s) = %v, want error %v", tc.path, err, tc.wantErr)
			}
		})
	}
}

// TestDirectoryInUseAfterSeal keeps a descriptor of an open version's directory (as a process
// whose working directory it is would) across the seal: through it the sealed version's
// files are found and listed.
func TestDirectoryInUseAfterSeal(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	ver := filepath.Join(mnt, "weight_v000001")
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ver, "w"), []byte("weights"))
	writeFile(t, filepath.Join(ver, "sub", "x"), []byte("x"))
	dirfd, err := unix.Open(ver, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dirfd)
	mustSeal(t, ver)
	fd, err := unix.Openat(dirfd, "sub/x", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("open sub/x through the directory in use: %v", err)
	}
	buf := make([]byte, 16)
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil || string(buf[:n]) != "x" {
		t.Fatalf("read sub/x: %q, %v", buf[:n], err)
	}
	if got := listDir(t, fmt.Sprintf("/proc/self/fd/%d", dirfd)); got != "sub w" {
		t.Errorf("the directory in use lists %q, want the sealed version's entries", got)
	}
	if err := unix.Mkdirat(dirfd, "new", 0o755); !errors.Is(err, syscall.EPERM) {
		t.Errorf("mkdir through the directory in use: %v, want EPERM", err)
	}
}

// TestDoneContentIsIgnored pins what bytes written into DONE do: DONE only marks the version
// sealed, its content is not stored and never fails the seal, and a write through a
// descriptor of DONE that outlived the seal succeeds (the shell's `echo x > DONE` closes its
// first descriptor, which seals, before echo writes). Each case seals, says so in its exit
// status and logs that the bytes were not stored.
func TestDoneContentIsIgnored(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	lg, _ := mountLogs.Load(mnt)
	newVersion := func(v uint64) string {
		ver := filepath.Join(mnt, VersionName(v))
		if err := os.Mkdir(ver, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(ver, "w"), []byte("weights"))
		return ver
	}
	tests := []struct {
		name  string
		write func(done string) error
	}{
		{"echo x > DONE", func(done string) error {
			out, err := exec.Command("sh", "-c", "echo x > "+done).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}},
		{"write then close", func(done string) error { return os.WriteFile(done, []byte("hello"), 0o644) }},
		{"write after the sealing close", func(done string) error {
			fd, err := syscall.Open(done, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			fd2, err := syscall.Dup(fd)
			if err != nil {
				syscall.Close(fd)
				return err
			}
			defer syscall.Close(fd2) // a descriptor left open would keep the mount busy
			if err := syscall.Close(fd); err != nil {
				return fmt.Errorf("the sealing close: %w", err)
			}
			if n, err := syscall.Write(fd2, []byte("x\n")); err != nil || n != 2 {
				return fmt.Errorf("write after the seal: %d, %w", n, err)
			}
			return nil
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := uint64(i + 1)
			ver := newVersion(v)
			if err := tc.write(filepath.Join(ver, doneName)); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if vs := b.Versions(); len(vs) != int(v) || vs[v-1].Number != v {
				t.Fatalf("version %d not sealed: %v", v, vs)
			}
			if got, _ := b.file(v, "w"); string(got) != "weights" {
				t.Errorf("stored w = %q", got)
			}
			if _, ok := b.file(v, doneName); ok {
				t.Errorf("DONE was stored")
			}
			found := false
			for _, l := range lg.(*testLog).logged() {
				found = found || (strings.Contains(l, VersionName(v)+"/DONE") && strings.Contains(l, "not stored"))
			}
			if !found {
				t.Errorf("no log line says DONE's bytes were not stored")
			}
		})
	}
}
