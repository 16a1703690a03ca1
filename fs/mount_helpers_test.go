package fs

import (
	"errors"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// testLog forwards the mount's log lines to the test until the test's cleanup has run (a
// late line from a server goroutine must not reach a finished test).
type testLog struct {
	mu    sync.Mutex
	t     testing.TB
	done  bool
	lines []string
}

func (l *testLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	if !l.done {
		l.t.Logf("fs: "+format, args...)
	}
}

// logged returns the lines logged so far.
func (l *testLog) logged() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// mountLogs are the logs of the mounts of mountTest, by mount point.
var mountLogs sync.Map // string -> *testLog

func (l *testLog) stop() {
	l.mu.Lock()
	l.done = true
	l.mu.Unlock()
}

// canMount skips the test where FUSE cannot be mounted.
func canMount(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("not root and no fusermount3")
		}
	}
}

// mountTest mounts b under a fresh directory and unmounts it when the test ends, failed or
// not. FUSE request tracing is on only under -v.
func mountTest(t *testing.T, b VersionStore, opts Options) (string, *Server) {
	t.Helper()
	canMount(t)
	mnt := t.TempDir()
	if opts.StagingDir == "" && !opts.ReadOnly {
		opts.StagingDir = t.TempDir()
	}
	lg := &testLog{t: t}
	mountLogs.Store(mnt, lg)
	opts.Logger = logtest.New(lg.logf)
	opts.Debug = testing.Verbose() && os.Getenv("WEIGHTFS_FUSE_DEBUG") != ""
	if opts.PollInterval == 0 {
		opts.PollInterval = 50 * time.Millisecond
	}
	srv, err := MountVersionStore(b, mnt, opts)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
		lg.stop()
		mountLogs.Delete(mnt)
	})
	return mnt, srv
}

func writeFile(t *testing.T, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// seal creates DONE in an open version and closes it, returning close's error.
func seal(dir string) error {
	f, err := os.Create(filepath.Join(dir, doneName))
	if err != nil {
		return err
	}
	return f.Close()
}

func mustSeal(t *testing.T, dir string) {
	t.Helper()
	if err := seal(dir); err != nil {
		t.Fatalf("seal %s: %v", dir, err)
	}
}

func listDir(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// pattern is deterministic test content.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// treeOf reads every regular file under dir into a map of slash paths, with directories as
// "path/" entries and permission bits in the value's prefix.
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if info.IsDir() {
			out[rel+"/"] = fmt.Sprintf("%o", info.Mode().Perm())
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%o:%s", info.Mode().Perm(), data)
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return out
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: %s missing", what, k)
		} else if g != w {
			t.Errorf("%s: %s differs (%d vs %d bytes of mode:content)", what, k, len(g), len(w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s", what, k)
		}
	}
}
