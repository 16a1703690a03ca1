package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignalWhileBusy signals a daemon whose mount is busy (a process has a file of it open
// and its working directory in it), with SIGTERM, SIGINT and SIGHUP: each time the daemon
// stays, the mount keeps serving and the log names the process that holds it. Once the
// holder is gone the next signal unmounts, and the daemon exits with status 0, leaving no
// mount behind.
func TestSignalWhileBusy(t *testing.T) {
	for _, last := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(last.String(), func(t *testing.T) {
			skipWithoutFUSE(t)
			work := t.TempDir()
			storeDir, mnt := filepath.Join(work, "store"), filepath.Join(work, "mnt")
			initStore(t, storeDir)
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			d := startMount(t, storeDir, mnt)
			ver := versionDir(mnt, 1)
			if err := os.Mkdir(ver, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ver, "w.bin"), []byte("weights"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ver, "DONE"), nil, 0o644); err != nil {
				t.Fatal(err)
			}

			holder := holdMount(t, ver, filepath.Join(ver, "w.bin"))
			for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
				if err := d.cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				waitOutput(t, d, i+1, "busy")
				select {
				case <-d.exited:
					t.Fatalf("the daemon exited on %v with its mount busy:\n%s", sig, d.out.String())
				default:
				}
				if data, err := os.ReadFile(filepath.Join(ver, "w.bin")); err != nil || string(data) != "weights" {
					t.Fatalf("after %v: read through the busy mount: %q, %v", sig, data, err)
				}
			}
			if out := d.out.String(); !strings.Contains(out, fmt.Sprintf("pid %d", holder.Process.Pid)) {
				t.Errorf("the log does not name the holder (pid %d):\n%s", holder.Process.Pid, out)
			}

			stopHolder(holder)
			if err := d.cmd.Process.Signal(last); err != nil {
				t.Fatal(err)
			}
			select {
			case <-d.exited:
			case <-time.After(hangLimit):
				t.Fatalf("the daemon did not exit on %v once the mount was free:\n%s", last, d.out.String())
			}
			if code := d.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("the daemon exited on %v with status %d (%v):\n%s", last, code, d.cmd.ProcessState, d.out.String())
			}
			if isMounted(mnt) {
				t.Errorf("%s is still mounted after the daemon exited", mnt)
			}
		})
	}
}

// TestSIGHUPUnmounts sends SIGHUP to an idle daemon (a closed terminal): it unmounts and
// exits with status 0 instead of dying and leaving a dead mount.
func TestSIGHUPUnmounts(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir, mnt := filepath.Join(work, "store"), filepath.Join(work, "mnt")
	initStore(t, storeDir)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startMount(t, storeDir, mnt)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(hangLimit):
		t.Fatalf("the daemon did not exit on SIGHUP:\n%s", d.out.String())
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the daemon exited on SIGHUP with status %d (%v)", code, d.cmd.ProcessState)
	}
	if isMounted(mnt) {
		t.Errorf("%s is still mounted after SIGHUP", mnt)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		t.Errorf("stat %s after SIGHUP: %v (a dead mount)", mnt, err)
	}
}

// holdMount starts a process whose working directory is dir and whose standard input is file
// (both in the mount): the mount is busy until stopHolder.
func holdMount(t *testing.T, dir, file string) *exec.Cmd {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("sleep", "600")
	cmd.Dir, cmd.Stdin = dir, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopHolder(cmd) })
	return cmd
}

func stopHolder(cmd *exec.Cmd) {
	if cmd.ProcessState == nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// waitOutput waits until the daemon's output holds word at least n times.
func waitOutput(t *testing.T, d *mountDaemon, n int, word string) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for strings.Count(d.out.String(), word) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d lines with %q from the daemon:\n%s", n, word, d.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
