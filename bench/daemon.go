package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Timeouts of a daemon's life. A mount that takes longer than mountTimeout to appear, a mount
// still there unmountWait after SIGTERM, or a daemon that does not exit within stopTimeout
// after that, is an error (the mount is detached and the daemon killed so the run can go on).
const (
	mountTimeout = 2 * time.Minute
	unmountWait  = 10 * time.Second // after SIGTERM, before the mount is detached lazily
	stopTimeout  = 2 * time.Minute  // after the unmount or the detach, before the daemon is killed
	pollEvery    = 20 * time.Millisecond
)

// daemon is a child process that serves a FUSE mount: `weightfs mount` or `bench loopback`.
type daemon struct {
	name    string
	mnt     string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error // valid once exited is closed
	cleanup func() error
}

// startDaemon starts bin with args, its output going to a log file in the work directory, and
// returns once mnt is a mount point. The daemon is stopped by stop, or by the cleaner if the
// run ends first.
func (b *bench) startDaemon(ctx context.Context, name, mnt, bin string, args ...string) (*daemon, error) {
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	abs, err := filepath.Abs(mnt)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	b.daemons++
	logPath := filepath.Join(b.work, "logs", fmt.Sprintf("%02d-%s.log", b.daemons, name))
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if b.opts.ProfileDir != "" {
		// weightfs profiles itself (cmd/weightfs/profile.go); the loopback ignores it.
		prof := filepath.Join(b.opts.ProfileDir, fmt.Sprintf("%02d-%s.prof", b.daemons, name))
		cmd.Env = append(os.Environ(), "WEIGHTFS_CPUPROFILE="+prof)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	d := &daemon{name: name, mnt: abs, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		d.waitErr = cmd.Wait()
		logFile.Close()
		close(d.exited)
	}()
	d.cleanup = b.clean.add("stop "+name+" at "+abs, d.shutdown)
	if err := d.waitMounted(ctx); err != nil {
		d.stop()
		return nil, err
	}
	return d, nil
}

// Pid is the daemon's process id.
func (d *daemon) Pid() int { return d.cmd.Process.Pid }

// waitMounted polls /proc/self/mountinfo until the mount point appears.
func (d *daemon) waitMounted(ctx context.Context) error {
	deadline := time.Now().Add(mountTimeout)
	for {
		mounted, err := isMountpoint(d.mnt)
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		if mounted {
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("%s exited before mounting %s (%v): %s", d.name, d.mnt, d.waitErr, d.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not mounted after %v: %s", d.name, d.mnt, mountTimeout, d.logTail())
		}
	}
}

// awaitExit waits for the daemon's exit after SIGTERM. Once the mount is gone the daemon may
// still finish its work (a weightfs writer brings its copy of the latest version forward
// after a seal, which its exit waits for): it gets stopTimeout for that. A mount still there
// after unmountWait is detached lazily; a daemon that does not exit is killed. Both are errors.
func (d *daemon) awaitExit() error {
	deadline := time.Now().Add(unmountWait)
	for {
		select {
		case <-d.exited:
			return nil
		case <-time.After(pollEvery):
		}
		if mounted, err := isMountpoint(d.mnt); err == nil && !mounted {
			select {
			case <-d.exited:
				return nil
			case <-time.After(stopTimeout):
				_ = d.cmd.Process.Kill()
				<-d.exited
				return fmt.Errorf("%s unmounted but did not exit within %v of SIGTERM: killed", d.name, stopTimeout)
			}
		}
		if time.Now().After(deadline) {
			break
		}
	}
	derr := detach(d.mnt)
	select {
	case <-d.exited:
		return fmt.Errorf("%s did not unmount within %v of SIGTERM: detached (%v)", d.name, unmountWait, derr)
	case <-time.After(stopTimeout):
	}
	_ = d.cmd.Process.Kill()
	<-d.exited
	return fmt.Errorf("%s did not exit after SIGTERM and a lazy unmount: killed (detach: %v)", d.name, derr)
}

// stop unmounts (SIGTERM: both daemons unmount and exit on it) and waits for the exit. If the
// unmount does not happen (a file still open: an interrupted write), the mount is detached
// lazily, and a daemon that still does not exit is killed. It is an error if the daemon
// needed any of that, exits with a failure, or leaves the mount behind.
func (d *daemon) stop() error { return d.cleanup() }

func (d *daemon) shutdown() error {
	select {
	case <-d.exited:
	default:
		if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("signal %s: %w", d.name, err)
		}
		if err := d.awaitExit(); err != nil {
			return err
		}
	}
	if mounted, _ := isMountpoint(d.mnt); mounted {
		derr := detach(d.mnt)
		return fmt.Errorf("%s exited but left %s mounted: detached (%v): %s", d.name, d.mnt, derr, d.logTail())
	}
	if d.waitErr != nil {
		return fmt.Errorf("%s: %v: %s", d.name, d.waitErr, d.logTail())
	}
	return nil
}

// logTail is the end of the daemon's output, for error messages.
func (d *daemon) logTail() string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b = bytes.TrimSpace(b)
	const keep = 1500
	if len(b) > keep {
		b = append([]byte("..."), b[len(b)-keep:]...)
	}
	if len(b) == 0 {
		return "(no output; log " + d.logPath + ")"
	}
	return fmt.Sprintf("log %s: %s", d.logPath, b)
}

// detach unmounts mnt lazily: with umount2(MNT_DETACH) as root, else with fusermount3 -uz.
func detach(mnt string) error {
	err := syscall.Unmount(mnt, syscall.MNT_DETACH)
	if err == nil {
		return nil
	}
	if path, lerr := exec.LookPath("fusermount3"); lerr == nil {
		out, ferr := exec.Command(path, "-uz", mnt).CombinedOutput()
		if ferr == nil {
			return nil
		}
		return fmt.Errorf("umount: %v; fusermount3 -uz: %v: %s", err, ferr, strings.TrimSpace(string(out)))
	}
	return fmt.Errorf("umount %s: %w", mnt, err)
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	points, err := parseMountinfo(b)
	if err != nil {
		return nil, err
	}
	var under []string
	for _, p := range points {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			under = append(under, p)
		}
	}
	return under, nil
}

// removeWorkDir removes dir after detaching any mount left below it: RemoveAll must never
// walk into a live mount.
func removeWorkDir(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for i := len(mounts) - 1; i >= 0; i-- { // deepest (mounted last) first
		if err := detach(mounts[i]); err != nil {
			return fmt.Errorf("not removing %s: %s is still mounted: %w", dir, mounts[i], err)
		}
	}
	return os.RemoveAll(dir)
}

// isMountpoint reports whether the absolute path mnt is a mount point in our namespace.
func isMountpoint(mnt string) (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("read mount table: %w", err)
	}
	points, err := parseMountinfo(b)
	if err != nil {
		return false, err
	}
	for _, p := range points {
		if p == mnt {
			return true, nil
		}
	}
	return false, nil
}

// parseMountinfo returns the mount points listed in the text of /proc/PID/mountinfo (the fifth
// field of each line, with the kernel's octal escapes decoded).
func parseMountinfo(b []byte) ([]string, error) {
	var points []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("mountinfo line %d: %d fields, want at least 5", n, len(f))
		}
		p, err := unescapeMountPath(f[4])
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", n, err)
		}
		points = append(points, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return points, nil
}

// unescapeMountPath decodes the \ooo escapes the kernel writes for space, tab, newline and
// backslash in mount paths.
func unescapeMountPath(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			out.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", fmt.Errorf("truncated escape in mount path %q", s)
		}
		v := 0
		for _, c := range s[i+1 : i+4] {
			if c < '0' || c > '7' {
				return "", fmt.Errorf("bad escape in mount path %q", s)
			}
			v = v*8 + int(c-'0')
		}
		if v > 0xff {
			return "", fmt.Errorf("bad escape in mount path %q", s)
		}
		out.WriteByte(byte(v))
		i += 3
	}
	return out.String(), nil
}
