package tests

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// campaignMount is startMount for a store that may be damaged: a daemon that exits or does
// not mount is an error (with the daemon, for its output), not the end of the test.
func campaignMount(t *testing.T, storeDir, mnt string, flags ...string) (*mountDaemon, error) {
	t.Helper()
	args := append([]string{"mount"}, flags...)
	args = append(args, storeDir, mnt)
	d := &mountDaemon{t: t, mnt: mnt, out: &lockedBuffer{}, exited: make(chan struct{})}
	bin, usesCLI := mountBinary(t)
	if !usesCLI {
		args = args[1:]
	}
	d.cmd = weightfsCommand(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start weightfs mount: %w", err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(d.stop) // a no-op once finish has run
	deadline := time.Now().Add(hangLimit)
	for !isServing(mnt) {
		select {
		case <-d.exited:
			d.campaignStop()
			return d, fmt.Errorf("weightfs %s exited with status %d before mounting", strings.Join(args, " "), d.cmd.ProcessState.ExitCode())
		default:
		}
		if time.Now().After(deadline) {
			d.campaignStop()
			return d, fmt.Errorf("weightfs %s: not mounted after 30s", strings.Join(args, " "))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return d, nil
}

// campaignCLITimeout bounds one verify or export of the small store (well under a second when
// all is well; hangLimit, so that only a real hang and never a loaded machine reaches it).
const campaignCLITimeout = hangLimit

// campaignCLIResult is a cliResult that may have timed out.
type campaignCLIResult struct {
	cliResult
	hung bool // no exit in campaignCLITimeout: it was sent SIGQUIT (its goroutines are in stderr)
}

// runCLI is runCLI with a time limit: a command that does not exit in campaignCLITimeout is
// sent SIGQUIT, so that its goroutines show where it is stuck, then killed.
func (tr *campaignTrial) runCLI(args ...string) campaignCLIResult {
	tr.t.Helper()
	cmd := weightfsCommand(weightfsBin(tr.t), args...)
	var out, errb lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		tr.t.Fatalf("run weightfs %v: %v", args, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var res campaignCLIResult
	var err error
	select {
	case err = <-exited:
	case <-time.After(campaignCLITimeout):
		res.hung = true
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case err = <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			err = <-exited
		}
	}
	res.stdout, res.stderr = out.String(), errb.String()
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			tr.t.Fatalf("run weightfs %v: %v", args, err)
		}
		res.code = ee.ExitCode()
	}
	return res
}

// campaignDaemonEnd is how a campaign daemon ended.
type campaignDaemonEnd struct {
	diedEarly  bool // it had exited before it was asked to
	notServing bool // it ran, but its mount no longer answered
	hung       bool // it did not exit within 20s of SIGTERM
	code       int  // its exit status
}

// campaignStop stops the daemon (SIGTERM, then SIGKILL after 20s), unmounts what it left, and says
// how it ended. The cleanup's stop does nothing after it.
func (d *mountDaemon) campaignStop() campaignDaemonEnd {
	var end campaignDaemonEnd
	d.once.Do(func() {
		select {
		case <-d.exited:
			end.diedEarly = !d.killed
		default:
			end.notServing = !isServing(d.mnt)
			_ = d.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-d.exited:
			case <-time.After(hangLimit):
				end.hung = true
				d.kill9()
			}
		}
		end.code = d.cmd.ProcessState.ExitCode()
		if isMounted(d.mnt) {
			_ = syscall.Unmount(d.mnt, syscall.MNT_DETACH)
		}
		if testing.Verbose() && os.Getenv("WEIGHTFS_CAMPAIGN_DAEMON_LOG") != "" {
			d.t.Logf("weightfs mount %s output:\n%s", d.mnt, d.out.String())
		}
	})
	return end
}
