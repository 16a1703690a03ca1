package tests

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deployContent is the one file of the version the deployment tests serve.
const deployContent = "weights for nobody\n"

// deployStore makes a store with one version (hello.txt) in a directory that every user may
// traverse (t.TempDir and its parent are 0700), so that a reader other than root reaches the
// mount point and meets the mount's own permissions, not the directories'.
func deployStore(t *testing.T) (work, storeDir string) {
	t.Helper()
	skipWithoutFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: reads as another user (setpriv) and mounts for that user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux)")
	}
	work = t.TempDir()
	for _, d := range []string{filepath.Dir(work), work} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	storeDir = filepath.Join(work, "store")
	initStore(t, storeDir)
	src := filepath.Join(work, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "hello.txt"), []byte(deployContent), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "commit", storeDir, src)
	return work, storeDir
}

// mkMountpoint makes an empty directory for a mount under work.
func mkMountpoint(t *testing.T, work, name string) string {
	t.Helper()
	mnt := filepath.Join(work, name)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt
}

// asNobody runs a program as uid/gid 65534 with no supplementary groups.
func asNobody(args ...string) (string, error) {
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mountOptions returns the per-mount and super-block options of the mount at mnt.
func mountOptions(t *testing.T, mnt string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && unescapeMountPath(f[4]) == mnt {
			return strings.Join(f[5:], " ")
		}
	}
	t.Fatalf("%s is not mounted", mnt)
	return ""
}

// TestMountAllowOther reads a version as nobody: refused (EACCES) by a mount made without
// --allow-other, served by one made with it (or -o allow_other). An allow_other mount always
// has default_permissions: nobody cannot create a version in a read-write mount whose root is
// root's 0755 directory.
func TestMountAllowOther(t *testing.T) {
	work, storeDir := deployStore(t)
	cache := filepath.Join(work, "cache")

	mnt := mkMountpoint(t, work, "private")
	d := startMount(t, storeDir, mnt, "--read-only", "--cache-dir", cache+"1")
	file := filepath.Join(mnt, "latest", "hello.txt")
	if data, err := os.ReadFile(file); err != nil || string(data) != deployContent {
		t.Fatalf("root reads %s: %q, %v", file, data, err)
	}
	out, err := asNobody("cat", file)
	if err == nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("nobody reads %s of a mount without --allow-other: err %v, output %q; want EACCES (Permission denied)", file, err, out)
	}
	d.stop()

	for _, flags := range [][]string{{"--allow-other"}, {"-o", "allow_other"}} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			mnt := mkMountpoint(t, work, "shared"+strings.Trim(flags[len(flags)-1], "-"))
			startMount(t, storeDir, mnt, append([]string{"--read-only", "--cache-dir", cache + flags[0]}, flags...)...)
			if opts := mountOptions(t, mnt); !strings.Contains(opts, "allow_other") || !strings.Contains(opts, "default_permissions") {
				t.Errorf("mount options %q: want allow_other and default_permissions", opts)
			}
			file := filepath.Join(mnt, "latest", "hello.txt")
			out, err := asNobody("cat", file)
			if err != nil || out != deployContent {
				t.Fatalf("nobody reads %s with --allow-other: %q, %v", file, out, err)
			}
		})
	}

	t.Run("not root, no user_allow_other", func(t *testing.T) {
		if conf, _ := os.ReadFile("/etc/fuse.conf"); strings.Contains("\n"+string(conf), "\nuser_allow_other") {
			t.Skip("/etc/fuse.conf allows allow_other to every user")
		}
		// The binary where nobody may run it (the tests' directory is root's alone).
		bin := filepath.Join(work, "weightfs")
		data, err := os.ReadFile(weightfsBin(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, data, 0o755); err != nil {
			t.Fatal(err)
		}
		mnt := mkMountpoint(t, work, "nobody")
		unmountAfter(t, mnt)
		out, err := asNobody(bin, "mount", "--read-only", "--allow-other", storeDir, mnt)
		if err == nil || !strings.Contains(out, "allow_other needs user_allow_other in /etc/fuse.conf") ||
			!strings.Contains(out, "add the line `user_allow_other` to /etc/fuse.conf") {
			t.Fatalf("nobody mounts with --allow-other: err %v, output %q; want the fuse.conf message", err, out)
		}
	})

	t.Run("read-write", func(t *testing.T) {
		mnt := mkMountpoint(t, work, "rw")
		startMount(t, storeDir, mnt, "--allow-other")
		out, err := asNobody("mkdir", filepath.Join(mnt, "weight_v000002"))
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Fatalf("nobody creates a version in an --allow-other read-write mount: err %v, output %q; want EACCES", err, out)
		}
		if out, err := asNobody("cat", filepath.Join(mnt, "weight_v000001", "hello.txt")); err != nil || out != deployContent {
			t.Fatalf("nobody reads through the read-write mount: %q, %v", out, err)
		}
	})
}

// helperLink makes DIR/mount.weightfs, a link to the CLI: the binary as mount(8) runs it.
func helperLink(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mount.weightfs")
	if err := os.Symlink(weightfsBin(t), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// unmountAfter unmounts mnt when the test ends if it is still mounted: a daemon started by
// mount.weightfs exits once its mount is gone.
func unmountAfter(t *testing.T, mnt string) {
	t.Cleanup(func() {
		if isMounted(mnt) {
			if err := syscall.Unmount(mnt, 0); err != nil {
				_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
			}
		}
	})
}

// runHelper runs the helper with argv as mount(8) gives it; a helper that does not return in
// a minute (a daemon holding its output) fails the test.
func runHelper(t *testing.T, helper string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helper, args...)
	cmd.Env = weightfsCommand(helper).Env // the tests' cache home
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not return within a minute:\n%s", helper, strings.Join(args, " "), out)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %s: %v", helper, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// TestMountHelper runs mount.weightfs with the argv mount(8) gives it for
// `mount -t weightfs STORE MNT -o OPTS` (and an fstab line's options): it returns 0 once the
// mount serves, the daemon behind it. Its failures (a typo, a store that is not one, a mount
// point already mounted) exit non-zero with the reason. Then, where /sbin/mount.weightfs is
// free, the same through the real mount(8).
func TestMountHelper(t *testing.T) {
	work, storeDir := deployStore(t)
	helper := helperLink(t)
	mnt := mkMountpoint(t, work, "mnt")
	unmountAfter(t, mnt)
	logFile := filepath.Join(work, "daemon.log")
	opts := "ro,version=latest,cache_dir=" + filepath.Join(work, "cache1") + ",log_file=" + logFile + ",defaults,nofail,_netdev,x-systemd.automount"
	out, code := runHelper(t, helper, storeDir, mnt, "-o", opts)
	if code != 0 {
		t.Fatalf("mount.weightfs: exit %d:\n%s", code, out)
	}
	// No waiting: the helper returned, so the mount serves.
	if data, err := os.ReadFile(filepath.Join(mnt, "hello.txt")); err != nil || string(data) != deployContent {
		t.Fatalf("read through the helper's mount: %q, %v", data, err)
	}
	if mo := mountOptions(t, mnt); !strings.HasPrefix(mo, "ro,") || !strings.Contains(mo, "fuse.weightfs") {
		t.Errorf("mount options %q: want a read-only fuse.weightfs mount", mo)
	}

	for _, tc := range []struct {
		name  string
		store string
		opts  string
		code  int
		want  string
	}{
		{"typo", storeDir, "ro,alow_other", 1, "alow_other: unknown mount option"},
		{"mounted", storeDir, "ro,cache_dir=" + filepath.Join(work, "cache2"), 32, "mount point is already mounted"},
		{"no store", filepath.Join(work, "nostore"), "ro", 32, "before the mount served"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := mnt
			if tc.name == "no store" {
				target = mkMountpoint(t, work, "mnt-nostore")
				unmountAfter(t, target)
			}
			out, code := runHelper(t, helper, tc.store, target, "-o", tc.opts)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("mount.weightfs %s %s -o %s: exit %d, output:\n%s\nwant exit %d and %q", tc.store, target, tc.opts, code, out, tc.code, tc.want)
			}
		})
	}
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Fatalf("umount %s: %v", mnt, err)
	}
	waitNoDaemon(t, mnt)
	if data, err := os.ReadFile(logFile); err != nil || !strings.Contains(string(data), "serving "+storeDir+" read-only at "+mnt) {
		t.Errorf("log_file %s: %q, %v; want the daemon's lines", logFile, data, err)
	}

	// With -o debug the daemon logs every request; the helper relayed its output through a
	// pipe that closed when the helper exited. The daemon must keep serving (not die of
	// SIGPIPE on its next log line, leaving a dead mount).
	t.Run("logs after the helper left", func(t *testing.T) {
		mnt := mkMountpoint(t, work, "mnt-debug")
		unmountAfter(t, mnt)
		out, code := runHelper(t, helper, storeDir, mnt, "-o", "ro,debug,cache_dir="+filepath.Join(work, "cache4"))
		if code != 0 {
			t.Fatalf("mount.weightfs -o debug: exit %d:\n%s", code, out)
		}
		for i := 0; i < 3; i++ {
			if data, err := os.ReadFile(filepath.Join(mnt, "latest", "hello.txt")); err != nil || string(data) != deployContent {
				t.Fatalf("read %d after the helper left: %q, %v", i, data, err)
			}
		}
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Fatalf("umount %s: %v", mnt, err)
		}
		waitNoDaemon(t, mnt)
	})

	t.Run("mount -t weightfs", func(t *testing.T) {
		const sbin = "/sbin/mount.weightfs"
		if _, err := os.Lstat(sbin); err == nil {
			t.Skipf("%s exists (installed?): not replaced by a test", sbin)
		}
		if err := os.Symlink(weightfsBin(t), sbin); err != nil {
			t.Skipf("cannot install %s: %v", sbin, err)
		}
		t.Cleanup(func() { os.Remove(sbin) })
		mnt := mkMountpoint(t, work, "mnt-t")
		unmountAfter(t, mnt)
		out, err := exec.Command("mount", "-t", "weightfs", storeDir, mnt, "-o",
			"ro,version=latest,cache_dir="+filepath.Join(work, "cache3")+",nofail").CombinedOutput()
		if err != nil {
			t.Fatalf("mount -t weightfs: %v\n%s", err, out)
		}
		if data, err := os.ReadFile(filepath.Join(mnt, "hello.txt")); err != nil || string(data) != deployContent {
			t.Fatalf("read through mount -t weightfs: %q, %v", data, err)
		}
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v\n%s", err, out)
		}
		waitNoDaemon(t, mnt)

		// An fstab line, from a file of the test's (mount -T) rather than /etc/fstab.
		fstab := filepath.Join(work, "fstab")
		line := storeDir + " " + mnt + " weightfs ro,allow_other,cache_dir=" + filepath.Join(work, "cache5") +
			",nofail,_netdev,x-systemd.requires-mounts-for=" + work + " 0 0\n"
		if err := os.WriteFile(fstab, []byte("# weightfs test\n"+line), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-T", fstab, mnt).CombinedOutput(); err != nil {
			t.Fatalf("mount -T %s %s (%s): %v\n%s", fstab, mnt, strings.TrimSpace(line), err, out)
		}
		if out, err := asNobody("cat", filepath.Join(mnt, "latest", "hello.txt")); err != nil || out != deployContent {
			t.Fatalf("nobody reads through the fstab mount: %q, %v", out, err)
		}
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v\n%s", err, out)
		}
		waitNoDaemon(t, mnt)
	})
}

// waitNoDaemon waits until no `weightfs mount` process serving mnt is left: a daemon that the
// helper started exits once its mount is unmounted.
func waitNoDaemon(t *testing.T, mnt string) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for {
		pids := daemonsOf(mnt)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("weightfs mount of %s still running (pids %v) after umount", mnt, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// daemonsOf lists the processes whose command line is `… mount … MNT`.
func daemonsOf(mnt string) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) > 2 && args[1] == "mount" && args[len(args)-1] == mnt {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// TestMountNotify starts the daemon as systemd does for a Type=notify unit: READY=1 comes on
// NOTIFY_SOCKET only once the mount serves (the test reads through the mount the moment it
// arrives), and SIGTERM sends STOPPING=1 and unmounts, the daemon exiting 0.
func TestMountNotify(t *testing.T) {
	work, storeDir := deployStore(t)
	mnt := mkMountpoint(t, work, "mnt")
	unmountAfter(t, mnt)
	sockPath := filepath.Join(work, "notify.sock")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()

	type note struct {
		msg     string
		read    string // hello.txt through the mount when the message came
		readErr error
	}
	notes := make(chan note, 8)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := sock.ReadFromUnix(buf)
			if err != nil {
				close(notes)
				return
			}
			nt := note{msg: string(buf[:n])}
			if strings.Contains(nt.msg, "READY=1") {
				var data []byte
				data, nt.readErr = os.ReadFile(filepath.Join(mnt, "latest", "hello.txt"))
				nt.read = string(data)
			}
			notes <- nt
		}
	}()

	cmd := weightfsCommand(weightfsBin(t), "mount", "-o", "ro,cache_dir="+filepath.Join(work, "cache"), storeDir, mnt)
	cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+sockPath)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(hangLimit):
				_ = cmd.Process.Kill()
			}
		}
	})

	next := func(what string) note {
		t.Helper()
		select {
		case nt := <-notes:
			return nt
		case <-exited:
			t.Fatalf("the daemon exited (%v) before %s:\n%s", waitErr, what, out.String())
		case <-time.After(time.Minute):
			t.Fatalf("no %s on NOTIFY_SOCKET within a minute:\n%s", what, out.String())
		}
		return note{}
	}
	ready := next("READY=1")
	if !strings.Contains(ready.msg, "READY=1") {
		t.Fatalf("first notification %q, want READY=1", ready.msg)
	}
	if ready.readErr != nil || ready.read != deployContent {
		t.Fatalf("at READY=1, reading through the mount gave %q, %v: READY came before the mount served", ready.read, ready.readErr)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if stopping := next("STOPPING=1"); !strings.Contains(stopping.msg, "STOPPING=1") {
		t.Errorf("notification after SIGTERM %q, want STOPPING=1", stopping.msg)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("the daemon exited with %v after SIGTERM:\n%s", waitErr, out.String())
		}
	case <-time.After(hangLimit):
		t.Fatalf("the daemon did not exit on SIGTERM:\n%s", out.String())
	}
	if isMounted(mnt) {
		t.Fatalf("%s is still mounted after SIGTERM", mnt)
	}
}

// TestMountRefusals: a mount point that holds files is refused unless --allow-non-empty, and
// one that is already a live weightfs mount is refused, each with a message that says why and
// names the way out; neither leaves a mount behind.
func TestMountRefusals(t *testing.T) {
	work, storeDir := deployStore(t)

	nonEmpty := mkMountpoint(t, work, "nonempty")
	if err := os.WriteFile(filepath.Join(nonEmpty, "mine.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	unmountAfter(t, nonEmpty)
	r := runMountBriefly(t, "--read-only", "--cache-dir", filepath.Join(work, "c1"), storeDir, nonEmpty)
	if r.code != 1 || !strings.Contains(r.stderr, "mount point is not empty") || !strings.Contains(r.stderr, "--allow-non-empty") {
		t.Errorf("mount on a non-empty directory: exit %d, stderr %q; want 1, 'mount point is not empty' and --allow-non-empty", r.code, r.stderr)
	}
	d := startMount(t, storeDir, nonEmpty, "--read-only", "--cache-dir", filepath.Join(work, "c2"), "--allow-non-empty")
	if _, err := os.Stat(filepath.Join(nonEmpty, "latest", "hello.txt")); err != nil {
		t.Errorf("--allow-non-empty mount does not serve: %v", err)
	}
	d.stop()
	if data, err := os.ReadFile(filepath.Join(nonEmpty, "mine.txt")); err != nil || string(data) != "mine" {
		t.Errorf("after unmount the directory's file is %q, %v", data, err)
	}

	mnt := mkMountpoint(t, work, "mnt")
	startMount(t, storeDir, mnt, "--read-only", "--cache-dir", filepath.Join(work, "c3"))
	r = runMountBriefly(t, "--read-only", "--cache-dir", filepath.Join(work, "c4"), "--allow-non-empty", storeDir, mnt)
	if r.code != 1 || !strings.Contains(r.stderr, "mount point is already mounted") || !strings.Contains(r.stderr, "fuse.weightfs") {
		t.Errorf("mount on a live mount: exit %d, stderr %q; want 1, 'mount point is already mounted' naming fuse.weightfs", r.code, r.stderr)
	}
	if data, err := os.ReadFile(filepath.Join(mnt, "latest", "hello.txt")); err != nil || string(data) != deployContent {
		t.Errorf("the first mount after the refused second: %q, %v", data, err)
	}
}

// runMountBriefly runs `weightfs mount ARGS` that should fail at once; if it mounts instead,
// it is stopped after a few seconds (SIGTERM) so that the test reports rather than hangs.
func runMountBriefly(t *testing.T, args ...string) cliResult {
	t.Helper()
	cmd := weightfsCommand(weightfsBin(t), append([]string{"mount"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	defer timer.Stop()
	_ = cmd.Wait()
	return cliResult{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// TestMakeInstall installs into a temporary prefix: the binary, mount.weightfs as a link to it
// (which, run by that name, is the helper), and the unit with the prefix's path in ExecStart;
// systemd-analyze, where there is one, finds nothing wrong with the unit.
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	dir := t.TempDir()
	prefix, sbin := filepath.Join(dir, "usr"), filepath.Join(dir, "sbin")
	cmd := exec.Command("make", "-s", "install", "PREFIX="+prefix, "SBINDIR="+sbin, "BIN="+filepath.Join(dir, "bin"))
	cmd.Dir = repoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	bin := filepath.Join(prefix, "bin", "weightfs")
	if st, err := os.Stat(bin); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("%s: %v, %v", bin, st, err)
	}
	helper := filepath.Join(sbin, "mount.weightfs")
	if target, err := os.Readlink(helper); err != nil || target != bin {
		t.Fatalf("%s -> %q, %v; want a link to %s", helper, target, err, bin)
	}
	if out, err := exec.Command(helper, "--help").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "Usage: mount.weightfs STORE MNT") {
		t.Fatalf("%s --help: %v\n%s", helper, err, out)
	}
	unit := filepath.Join(prefix, "lib", "systemd", "system", "weightfs@.service")
	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "ExecStart=" + bin + " mount -o ${OPTS} ${STORE} ${MNT}"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("%s lacks %q:\n%s", unit, want, data)
		}
	}
	if strings.Contains(string(data), "@BINDIR@") {
		t.Errorf("%s still has @BINDIR@", unit)
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		out, err := exec.Command("systemd-analyze", "verify", unit).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
		}
	}
}
