package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMountKill9MidWrite kills the read-write daemon with SIGKILL at random points while a
// writer copies a checkpoint into a new version and seals it (ten trials). After each kill a
// new daemon mounts over the stale mount point; the version being written is either gone or,
// if its seal finished before the kill, complete; every sealed version reads back exact.
func TestMountKill9MidWrite(t *testing.T) {
	skipWithoutFUSE(t)
	const trials = 10
	k := newKillRig(t, 2+trials)
	storeDir, mnt, want, writerCmd := k.storeDir, k.mnt, k.want, k.writerCmd
	d := startMount(t, storeDir, mnt)
	// Time an undisturbed write and seal, so the kills land inside that window.
	var window time.Duration
	for v := 1; v <= 2; v++ {
		start := time.Now()
		if out, err := writerCmd(v).CombinedOutput(); err != nil {
			t.Fatalf("write v%d: %v\n%s", v, err, out)
		}
		window = time.Since(start)
	}
	window = max(window, 50*time.Millisecond)
	t.Logf("an undisturbed write and seal takes %v", window)
	sealed := map[int]bool{1: true, 2: true}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	for trial := 0; trial < trials; trial++ {
		v := 3 + trial
		delay, writerErr := k.saveAndKill(d, v, time.Duration(rng.Int64N(int64(window))))

		// The new daemon must cope with the stale mount point itself.
		d = startMount(t, storeDir, mnt)
		listing := rootListing(t, mnt)
		present := strings.Contains(listing, filepath.Base(versionDir(mnt, v)))
		t.Logf("trial %d: killed after %v; writer: %v; v%d sealed: %v", trial, delay, writerErr, v, present)
		if writerErr == nil && !present {
			t.Errorf("trial %d: the writer's seal of v%d succeeded but the version is gone", trial, v)
		}
		if present {
			sealed[v] = true
		}
		var wantLS []string
		wantLS = append(wantLS, "deltas", "latest", "patches")
		for n := 1; n <= v; n++ {
			if sealed[n] {
				wantLS = append(wantLS, filepath.Base(versionDir(mnt, n)))
			}
		}
		if got := strings.Join(wantLS, " "); listing != got {
			t.Fatalf("trial %d: ls %q, want %q", trial, listing, got)
		}
		for n := range sealed {
			sameHashes(t, fmt.Sprintf("trial %d: v%d", trial, n), sha256sumTree(t, versionDir(mnt, n)), want[n])
		}
		// The killed daemon's staging files are gone: only the new daemon's directory is left.
		if ents, err := os.ReadDir(filepath.Join(storeDir, "cache", "staging")); err != nil || len(ents) != 1 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("trial %d: staging directory holds %v (%v), want only the live mount's", trial, names, err)
		}
	}
	d.stop()
	verifyStore(t, storeDir)
}

// killRig is the setup of the kill -9 tests: a store, n generated checkpoints and a mount
// point, and the trainer that saves version v into the mount.
type killRig struct {
	t                   *testing.T
	work, storeDir, mnt string
	want                map[int]map[string]string
}

func newKillRig(t *testing.T, n int) *killRig {
	work := t.TempDir()
	k := &killRig{t: t, work: work, storeDir: filepath.Join(work, "store"), mnt: filepath.Join(work, "mnt")}
	initStore(t, k.storeDir)
	k.want = genCheckpoints(t, work, 1_000_000, n)
	if err := os.Mkdir(k.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return k
}

// writerCmd is a trainer: copy checkpoint v into a new version, then seal it.
func (k *killRig) writerCmd(v int) *exec.Cmd {
	return exec.Command("sh", "-c", `cp -r "$1" "$2" && touch "$2/DONE"`, "sh", srcDir(k.work, v), versionDir(k.mnt, v))
}

// saveAndKill starts saving version v, kills d with SIGKILL after delay, and returns what the
// writer got. A writer still hanging 30 s after the daemon died is an error of the test.
func (k *killRig) saveAndKill(d *mountDaemon, v int, delay time.Duration) (time.Duration, error) {
	writer := k.writerCmd(v)
	if err := writer.Start(); err != nil {
		k.t.Fatal(err)
	}
	writerDone := make(chan error, 1)
	go func() { writerDone <- writer.Wait() }()
	time.Sleep(delay)
	d.kill9()
	select {
	case err := <-writerDone:
		return delay, err
	case <-time.After(hangLimit):
		_ = writer.Process.Kill()
		k.t.Errorf("v%d: the writer hung after the daemon died", v)
		return delay, <-writerDone
	}
}
