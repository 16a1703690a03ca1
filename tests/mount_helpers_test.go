package tests

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

// hangLimit is how long a test waits for what must happen (a daemon serving, exiting on a
// signal, a version appearing) before it calls it hung: far above the slowest run seen on a
// loaded 2-core machine, since it only runs out when the thing never happens.
const hangLimit = 2 * time.Minute

// mountDaemon is one `weightfs mount` process serving a mount point.
type mountDaemon struct {
	t      *testing.T
	mnt    string
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
	once   sync.Once
	killed bool // by kill9: its exit status means nothing
}

// lockedBuffer collects a daemon's output from its pipes while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// skipWithoutFUSE skips tests that need to mount where FUSE is not available.
func skipWithoutFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("not root and no fusermount3: cannot mount")
		}
	}
}

// startMount runs `weightfs mount FLAGS STORE MNT` and returns once MNT is mounted. The
// daemon is stopped and MNT unmounted when the test ends, failed or not. FUSE request traces
// (--debug) are switched on only under -v with WEIGHTFS_FUSE_DEBUG=1.
func startMount(t *testing.T, storeDir, mnt string, flags ...string) *mountDaemon {
	t.Helper()
	skipWithoutFUSE(t)
	args := append([]string{"mount"}, flags...)
	if testing.Verbose() && os.Getenv("WEIGHTFS_FUSE_DEBUG") != "" {
		args = append(args, "--debug")
	}
	args = append(args, storeDir, mnt)
	d := &mountDaemon{t: t, mnt: mnt, out: &lockedBuffer{}, exited: make(chan struct{})}
	bin, usesCLI := mountBinary(t)
	if !usesCLI {
		args = args[1:] // mountd takes the flags of `weightfs mount` without the subcommand
	}
	d.cmd = weightfsCommand(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	// If the test binary dies, the daemon unmounts and exits rather than staying behind.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start weightfs mount: %v", err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(d.stop)
	deadline := time.Now().Add(hangLimit)
	for !isServing(mnt) {
		select {
		case <-d.exited:
			t.Fatalf("weightfs mount %s exited before mounting:\n%s", strings.Join(args, " "), d.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("weightfs mount %s: not mounted after 30s:\n%s", mnt, d.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return d
}

var (
	mountBinOnce sync.Once
	mountBinPath string
	mountBinCLI  bool
	mountBinErr  error
)

// mountBinary builds the program that serves mounts: `weightfs` when cmd/weightfs builds,
// else the tests' own tests/mountd (the same fs.Mount behind the same flags), so the mount
// tests do not wait on the CLI.
func mountBinary(t *testing.T) (path string, isCLI bool) {
	t.Helper()
	mountBinOnce.Do(func() {
		cli, err := buildCLI()
		if err == nil {
			mountBinPath, mountBinCLI = cli, true
			return
		}
		t.Logf("cmd/weightfs does not build; mounting with tests/mountd instead:\n%v", err)
		mountd := filepath.Join(testRoot, "mountd")
		build := exec.Command("go", "build", "-o", mountd, "./tests/mountd")
		build.Dir = repoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			mountBinErr = fmt.Errorf("build tests/mountd: %v\n%s", err, out)
			return
		}
		mountBinPath = mountd
	})
	if mountBinErr != nil {
		t.Fatal(mountBinErr)
	}
	return mountBinPath, mountBinCLI
}

// repoRoot is the module's top directory.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// initStore creates a store with the library (not the CLI, which other tests cover).
func initStore(t *testing.T, dir string) {
	t.Helper()
	if err := store.Init(dir); err != nil {
		t.Fatalf("init store: %v", err)
	}
}

// verifyStore re-reads and re-hashes everything in the store; any damage fails the test.
func verifyStore(t *testing.T, dir string) {
	t.Helper()
	st, err := store.Open(dir, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatalf("open store to verify: %v", err)
	}
	defer st.Close()
	rep, err := st.Verify(nil)
	if err != nil {
		t.Fatalf("verify: %v (%d damaged: %v)", err, len(rep.Damaged), rep.Damaged)
	}
	t.Logf("verify: %d objects, %d versions, %d bytes: clean", rep.Objects, rep.Versions, rep.Bytes)
}

// stop asks the daemon to unmount and exit (SIGTERM), kills it if it does not, and makes sure
// nothing stays mounted. It may be called more than once.
func (d *mountDaemon) stop() {
	d.once.Do(func() {
		select {
		case <-d.exited:
		default:
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(hangLimit):
				d.t.Errorf("weightfs mount %s did not exit on SIGTERM", d.mnt)
				d.killed = true
				_ = d.cmd.Process.Kill()
				<-d.exited
			}
		}
		if code := d.cmd.ProcessState.ExitCode(); !d.killed && code != 0 {
			d.t.Errorf("weightfs mount %s exited with status %d", d.mnt, code)
		}
		if isMounted(d.mnt) {
			_ = syscall.Unmount(d.mnt, syscall.MNT_DETACH)
		}
		if d.t.Failed() || testing.Verbose() {
			d.t.Logf("weightfs mount %s output:\n%s", d.mnt, d.out.String())
		}
	})
}

// kill9 kills the daemon with SIGKILL and waits for it; the mount point is left stale.
func (d *mountDaemon) kill9() {
	d.killed = true
	_ = d.cmd.Process.Kill()
	<-d.exited
}

// isServing reports whether a live file system is mounted at mnt: it answers stat and is on
// another device than its parent. (A stale mount of a killed daemon answers ENOTCONN; a bare
// directory is on its parent's device.)
func isServing(mnt string) bool {
	var st, parent syscall.Stat_t
	if syscall.Stat(mnt, &st) != nil || syscall.Stat(filepath.Dir(mnt), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// isMounted reports whether mnt is a mount point of this mount namespace.
func isMounted(mnt string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountPath(fields[4]) == mnt {
			return true
		}
	}
	return false
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				out = append(out, c)
				i += 3
				continue
			}
		}
		out = append(out, s[i])
	}
	return string(out)
}

// genCheckpoints writes n successive generated checkpoints (two shards, index, configs) to
// DIR/src1 ... DIR/srcN and returns their file hashes.
func genCheckpoints(t *testing.T, dir string, params int64, n int) map[int]map[string]string {
	return genSeries(t, dir, params, 11, n, nil)
}

// genSeries generates n successive checkpoints (lr 3e-6, two shards) into DIR/srcV one after
// another, calling each (if set) with every version's directory once written, and returns
// their file hashes.
func genSeries(t *testing.T, dir string, params int64, seed uint64, n int, each func(v int, src string)) map[int]map[string]string {
	t.Helper()
	cfg := gen.ConfigForParams(params, 3e-6, seed)
	cfg.Shards = 2
	m, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]map[string]string{}
	for v := 1; v <= n; v++ {
		if v > 1 {
			m.Step()
		}
		src := srcDir(dir, v)
		if err := m.WriteCheckpoint(src); err != nil {
			t.Fatal(err)
		}
		want[v] = treeHashes(t, src)
		if each != nil {
			each(v, src)
		}
	}
	return want
}

func srcDir(dir string, v int) string { return filepath.Join(dir, fmt.Sprintf("src%d", v)) }

func versionDir(mnt string, v int) string {
	return filepath.Join(mnt, fmt.Sprintf("weight_v%06d", v))
}

// run runs a real program and fails the test if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// sha256sumTree hashes every regular file under dir with the real sha256sum(1), so the bytes
// are read through the kernel by another program.
func sha256sumTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	got := map[string]string{}
	if len(files) == 0 {
		return got
	}
	sort.Strings(files)
	for _, line := range strings.Split(strings.TrimSpace(run(t, "sha256sum", files...)), "\n") {
		sum, p, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("sha256sum printed %q", line)
		}
		rel, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(rel)] = sum
	}
	return got
}

// mmapSHA256 maps a file read-only and hashes the mapped bytes.
func mmapSHA256(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap %s: %v", p, err)
	}
	defer syscall.Munmap(data)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// rootListing is `ls MNT` as one string.
func rootListing(t *testing.T, mnt string) string {
	t.Helper()
	return strings.Join(strings.Fields(run(t, "ls", mnt)), " ")
}

func expectErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// rwAndROMountPoints makes work/rw and work/ro, the mount points of a test's writer and
// read-only mounts.
func rwAndROMountPoints(t *testing.T, work string) (rw, ro string) {
	t.Helper()
	rw, ro = filepath.Join(work, "rw"), filepath.Join(work, "ro")
	for _, d := range []string{rw, ro} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return rw, ro
}
