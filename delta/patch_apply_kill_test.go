//go:build linux

package delta

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestApplyKill9 runs the real apply (ApplyPatchFile: mapped writes, no fsync) in a child
// process that SIGKILLs itself between two steps, then checks what the page cache kept: a
// marked file that no reader accepts, or exactly one of the versions; and that running the
// apply again finishes it. This is the claim that kill -9 safety needs no fsync.
func TestApplyKill9(t *testing.T) {
	base, result, raw, _ := bigTestPatch(t)
	dir := t.TempDir()
	patchPath := filepath.Join(dir, "patch.safetensors")
	if err := os.WriteFile(patchPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		step     applyStep
		nth      int
		marked   bool
		resuming bool // a journal is left
	}{
		{stepScanned, 1, false, false},
		{stepJournaled, 1, false, true},
		{stepMarked, 1, true, true},
		{stepWroteRun, 2, true, true}, // some changes stored, most not
		{stepWritten, 1, true, true},
		{stepRestored, 1, false, true},
	}
	for _, s := range steps {
		t.Run(fmt.Sprintf("%s#%d", s.step, s.nth), func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "model.safetensors")
			if err := os.WriteFile(target, base, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestApplyKill9Child$")
			cmd.Env = append(os.Environ(), killChildEnv+"="+fmt.Sprintf("%s|%d|%s|%s", s.step, s.nth, patchPath, target))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("child was not killed: %v\n%s", err, out)
			}
			got, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			checkCrashState(t, got, s.marked, base, result)
			if s.step == stepWroteRun && (bytes.Equal(got[8:], base[8:]) || bytes.Equal(got[8:], result[8:])) {
				t.Error("killed during the writes, the data is all old or all new")
			}
			if _, err := os.Stat(target + JournalSuffix); (err == nil) != s.resuming {
				t.Errorf("journal present = %v, want %v", err == nil, s.resuming)
			}
			// The killed apply left its lock file, but the kernel dropped its flock: the re-run,
			// which would refuse a held lock (NoWait), takes it and removes it.
			if _, err := os.Lstat(target + LockSuffix); err != nil {
				t.Errorf("the killed apply left no lock file: %v", err)
			}
			res, err := ApplyPatchFileWith(patchPath, target, ApplyOptions{NoWait: true})
			if err != nil || res.Recovered != s.resuming {
				t.Fatalf("re-run: %+v %v", res, err)
			}
			if got, _ := os.ReadFile(target); !bytes.Equal(got, result) {
				t.Fatal("re-run did not give the result")
			}
			if entries, _ := os.ReadDir(filepath.Dir(target)); len(entries) != 1 {
				t.Errorf("%d entries next to the target, want it alone", len(entries))
			}
		})
	}
}

const killChildEnv = "WEIGHTFS_TEST_APPLY_KILL"

// TestApplyKill9Child is the child of TestApplyKill9; it does nothing unless started by it.
func TestApplyKill9Child(t *testing.T) {
	spec := os.Getenv(killChildEnv)
	if spec == "" {
		t.Skip("only run as the child of TestApplyKill9")
	}
	parts := strings.Split(spec, "|")
	nth, _ := strconv.Atoi(parts[1])
	seen := 0
	cfg := applyConfig{chunk: scanChunk, failpoint: func(step string) error {
		if step == parts[0] {
			if seen++; seen == nth {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		}
		return nil
	}}
	res, err := applyPatchFile(parts[2], parts[3], cfg)
	t.Fatalf("apply was not killed: %+v %v", res, err)
}
