package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseMountinfo(t *testing.T) {
	text := `22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
36 22 0:32 / /tmp/with\040space rw,nosuid - fuse.weightfs weightfs rw,user_id=0
37 22 0:33 / /tmp/back\134slash rw - tmpfs tmpfs rw

`
	got, err := parseMountinfo([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/", "/tmp/with space", `/tmp/back\slash`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("mount points %q, want %q", got, want)
	}
	for _, bad := range []string{"1 2 3 4\n", `1 2 3 4 /a\04 x` + "\n", `1 2 3 4 /a\09x x` + "\n", `1 2 3 4 /a\777 x` + "\n"} {
		if _, err := parseMountinfo([]byte(bad)); err == nil {
			t.Errorf("parseMountinfo(%q): no error", bad)
		}
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte("36 22 0:32 / /tmp/a\\040b rw - fuse x rw\n"))
	f.Add([]byte("1 2 3 4 \\\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		points, err := parseMountinfo(b)
		if err != nil {
			return
		}
		for _, p := range points {
			if strings.ContainsAny(p, "\n") && !strings.Contains(string(b), `\012`) {
				t.Fatalf("a newline appeared from nowhere in %q", p)
			}
		}
	})
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:          "/plain",
		`/a\040b`:         "/a b",
		`/t\011\012\134x`: "/t\t\n\\x",
	} {
		got, err := unescapeMountPath(in)
		if err != nil || got != want {
			t.Errorf("unescapeMountPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestIsMountpointRoot(t *testing.T) {
	ok, err := isMountpoint("/")
	if err != nil || !ok {
		t.Fatalf("isMountpoint(/) = %v, %v", ok, err)
	}
	ok, err = isMountpoint(t.TempDir())
	if err != nil || ok {
		t.Fatalf("isMountpoint(fresh temp dir) = %v, %v", ok, err)
	}
}

// TestDaemonExitsBeforeMount: a daemon that dies without mounting is an error that carries its
// output, and leaves nothing registered with the cleaner.
func TestDaemonExitsBeforeMount(t *testing.T) {
	b := &bench{work: t.TempDir(), log: os.Stderr}
	b.clean = newCleaner(os.Stderr)
	mnt := filepath.Join(b.work, "mnt")
	_, err := b.startDaemon(context.Background(), "failing", mnt, "/bin/sh", "-c", "echo it broke >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "it broke") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("error %v, want the exit status and the output", err)
	}
	if n := len(b.clean.actions); n != 0 {
		t.Fatalf("%d clean-up actions left", n)
	}
}

// TestDaemonFinishesAfterUnmount: a daemon whose mount is gone may take longer than
// unmountWait to exit after SIGTERM (a weightfs writer finishing its copy's update): that is
// no error.
func TestDaemonFinishesAfterUnmount(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	// It exits 2 s after unmountWait: the harness must wait that long and see a clean exit.
	script := fmt.Sprintf(`trap 'sleep %d; exit 0' TERM; touch %q; while :; do sleep 0.05; done`, int(unmountWait/time.Second)+2, ready)
	cmd := exec.Command("/bin/sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{name: "slow-exit", mnt: t.TempDir(), cmd: cmd, exited: make(chan struct{})}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break // the trap is set
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the script did not start")
		}
	}
	start := time.Now()
	if err := d.shutdown(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if took := time.Since(start); took < unmountWait {
		t.Fatalf("returned after %v, before the daemon exited", took)
	}
	if d.waitErr != nil {
		t.Fatalf("the daemon did not exit cleanly: %v", d.waitErr)
	}
}
