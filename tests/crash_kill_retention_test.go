package tests

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMountKill9WithRetention kills the read-write daemon with SIGKILL at random points while
// a writer saves a version and the mount's retention gc (--keep-last 2 --keep-exact: it
// drops at every seal) runs after each seal
// (eight trials). After each kill a new daemon mounts; every version it lists reads back
// exact, the newest sealed version is listed, and at the end the store verifies.
func TestMountKill9WithRetention(t *testing.T) {
	skipWithoutFUSE(t)
	const trials = 8
	k := newKillRig(t, 3+trials)
	storeDir, mnt, want, writerCmd := k.storeDir, k.mnt, k.want, k.writerCmd
	flags := []string{"--keep-last", "2", "--keep-exact"}
	d := startMount(t, storeDir, mnt, flags...)
	var window time.Duration
	for v := 1; v <= 3; v++ {
		start := time.Now()
		if out, err := writerCmd(v).CombinedOutput(); err != nil {
			t.Fatalf("write v%d: %v\n%s", v, err, out)
		}
		window = time.Since(start)
	}
	// The kills land in the save and in the retention gc after it.
	window = max(2*window, 50*time.Millisecond)
	newest := 3
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 13))
	for trial := range trials {
		v := 4 + trial
		delay, writerErr := k.saveAndKill(d, v, time.Duration(rng.Int64N(int64(window))))
		d = startMount(t, storeDir, mnt, flags...)
		listing := rootListing(t, mnt)
		t.Logf("trial %d: killed after %v; writer: %v; listing %s", trial, delay, writerErr, listing)
		if writerErr == nil {
			newest = v
		}
		if !strings.Contains(listing, filepath.Base(versionDir(mnt, newest))) {
			t.Errorf("trial %d: v%d, the newest sealed, is not listed", trial, newest)
		}
		for n := 1; n <= v; n++ {
			if strings.Contains(listing, filepath.Base(versionDir(mnt, n))) {
				sameHashes(t, fmt.Sprintf("trial %d: v%d", trial, n), sha256sumTree(t, versionDir(mnt, n)), want[n])
			}
		}
	}
	d.stop()
	verifyStore(t, storeDir)
}
