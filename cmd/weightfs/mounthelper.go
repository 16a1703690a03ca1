package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weightfs/weightfs/store/location"
)

// helperName is the name mount(8) runs for `mount -t weightfs` and fstab lines of type
// weightfs (/sbin/mount.weightfs, a link to this binary that `make install` makes).
const helperName = "mount.weightfs"

// Exit statuses of the helper, as mount(8) documents them for itself.
const (
	helperUsage   = 1
	helperFailure = 32
)

// mountHelper is the binary run as mount.weightfs: `mount.weightfs STORE MNT [-sfnv] [-o
// OPTS]`, the argv mount(8) gives a helper. It starts `weightfs mount -o OPTS STORE MNT` as a
// daemon in its own session and returns once the mount serves (the daemon's READY=1 on a
// notify socket of the helper's, the same message a systemd unit waits for): 0, or the
// daemon's error (on stderr) and a non-zero status when it exits before that.
func mountHelper(e *env, argv []string) int {
	var pos, opts []string
	fake := false
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-o" || a == "-N" || a == "-t":
			if i+1 >= len(argv) {
				fmt.Fprintf(e.stderr, "%s: %s needs a value\n", helperName, a)
				return helperUsage
			}
			i++
			if a == "-o" {
				opts = append(opts, argv[i])
			}
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			opts = append(opts, a[2:])
		case a == "-h" || a == "--help":
			fmt.Fprintf(e.stdout, "Usage: %s STORE MNT [-sfnvrw] [-o OPTIONS]\n\nRun by mount(8) for `mount -t weightfs STORE MNT -o OPTIONS` and fstab lines of type weightfs:\nstarts `weightfs mount -o OPTIONS STORE MNT` in the background and returns once the mount serves.\nOptions: see `weightfs mount --help` (-o).\n", helperName)
			return 0
		case len(a) > 1 && a[0] == '-' && strings.Trim(a[1:], "sfnvrw") == "":
			// -s (sloppy), -n (no mtab), -v (verbose) change nothing here; -f (fake) mounts
			// nothing; -r and -w are ro and rw.
			fake = fake || strings.Contains(a, "f")
			if strings.Contains(a, "r") {
				opts = append(opts, "ro")
			}
		case len(a) > 1 && a[0] == '-':
			fmt.Fprintf(e.stderr, "%s: unknown flag %s\n", helperName, a)
			return helperUsage
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		fmt.Fprintf(e.stderr, "%s: expected STORE MNT, got %d argument(s)\nUsage: %s STORE MNT [-sfnv] [-o OPTIONS]\n", helperName, len(pos), helperName)
		return helperUsage
	}
	// A typo fails here, before anything starts.
	var check mountFlags
	for _, o := range opts {
		if err := applyMountOptions(&check, o); err != nil {
			fmt.Fprintf(e.stderr, "%s: %v\n", helperName, err)
			return helperUsage
		}
	}
	if fake {
		return 0
	}
	if err := daemonize(e, pos[0], pos[1], strings.Join(opts, ",")); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", helperName, err)
		return helperFailure
	}
	return 0
}

// daemonize runs `weightfs mount -o opts storeArg mnt` in a new session with its working
// directory at / (so it holds no file system busy), and waits for its READY=1 or its exit.
func daemonize(e *env, storeArg, mnt, opts string) error {
	if location.IsLocal(storeArg) {
		abs, err := filepath.Abs(storeArg)
		if err != nil {
			return err
		}
		storeArg = abs
	}
	mnt, err := filepath.Abs(mnt)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the weightfs binary: %w", err)
	}
	// An abstract socket: nothing to clean up, and it goes with this process.
	sockName := fmt.Sprintf("@weightfs-mount-%d-%d", os.Getpid(), time.Now().UnixNano())
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockName, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify socket: %w", err)
	}
	defer sock.Close()

	args := []string{"mount"}
	if opts != "" {
		args = append(args, "-o", opts)
	}
	args = append(args, storeArg, mnt)
	cmd := exec.Command(exe, args...)
	cmd.Dir = "/"
	cmd.Env = append(withoutEnv(os.Environ(), "NOTIFY_SOCKET"), "NOTIFY_SOCKET="+sockName)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The daemon writes to our stderr directly where that outlives us harmlessly (a
	// terminal, a file, the journal under systemd). A pipe is another matter: whoever reads
	// it (a script, a test) would wait for the daemon's end, so the daemon gets a pipe of
	// ours instead, relayed until the mount serves (later lines: -o log_file=FILE).
	var relayDone chan struct{}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if isPipe(os.Stderr) {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = w, w
		relayDone = make(chan struct{})
		go func() {
			defer close(relayDone)
			_, _ = io.Copy(e.stderr, r)
		}()
	}
	err = cmd.Start()
	if w, ok := cmd.Stderr.(*os.File); ok && w != os.Stderr {
		w.Close() // the daemon holds its copy: the relay ends when the daemon does
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", exe, err)
	}
	ready := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := sock.ReadFromUnix(buf)
			if err != nil {
				return
			}
			if isReady(buf[:n]) {
				close(ready)
				return
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-ready:
		return nil
	case err := <-exited:
		if relayDone != nil {
			<-relayDone
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) || err == nil {
			return fmt.Errorf("weightfs mount %s %s exited (%v) before the mount served; its error is above", storeArg, mnt, cmd.ProcessState)
		}
		return fmt.Errorf("weightfs mount %s %s: %w", storeArg, mnt, err)
	}
}

// isReady reports whether a notify datagram holds the line READY=1.
func isReady(msg []byte) bool {
	sc := bufio.NewScanner(strings.NewReader(string(msg)))
	for sc.Scan() {
		if sc.Text() == "READY=1" {
			return true
		}
	}
	return false
}

func isPipe(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeNamedPipe != 0
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}
