package tests

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/store/location"
	"github.com/weightfs/weightfs/store/s3"

	"github.com/weightfs/weightfs/store"
)

// TestS3TrainerAndTwoInferenceNodes runs the S3 deployment end to end against a real S3
// server on loopback (versitygw): a read-write mount (the trainer) and two read-only mounts
// (two inference nodes: separate processes and cache directories) of one s3:// store.
//
//   - 10 versions (a generated 16M-parameter model, two shards) are copied in with cp and
//     sealed with touch DONE; both readers list each version (how long after its seal is
//     logged, not asserted: a loaded machine is slow, not wrong), and every file's SHA-256
//     read through them matches what was written.
//   - From the second version on, each reader downloads (objects and manifest, counted by
//     its own process) within 10% of the bytes the version added to the store.
//   - The S3 server is stopped for 10 s while version 6 is being sealed: the readers keep
//     serving the latest version from their materialized copies (right bytes or EIO, never
//     others), the seal completes once the server is back, and both readers catch up.
//   - A second writer is refused, naming the lease holder and how to break a dead one.
func TestS3TrainerAndTwoInferenceNodes(t *testing.T) {
	skipWithoutFUSE(t)
	srv := s3test.Start(t)
	srv.SetEnv(t) // the weightfs processes inherit the endpoint and credentials
	work := t.TempDir()
	url := "s3://weightfs-e2e/runs/exp1"
	mustCLI(t, "init", url)

	const versions, outageAt = 10, 6
	want := genCheckpoints(t, work, 16_000_000, versions)
	dirs := map[string]string{}
	for _, d := range []string{"rw", "ro1", "ro2", "rw-cache", "ro1-cache", "ro2-cache"} {
		dirs[d] = filepath.Join(work, d)
		if err := os.Mkdir(dirs[d], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	startMount(t, url, dirs["rw"], "--cache-dir", dirs["rw-cache"])
	readers := []string{"ro1", "ro2"}
	for _, r := range readers {
		startMount(t, url, dirs[r], "--read-only", "--cache-dir", dirs[r+"-cache"])
	}

	t.Run("second writer refused", func(t *testing.T) {
		res := runCLI(t, "commit", url, srcDir(work, 1))
		if res.code != 1 || !strings.Contains(res.stderr, "store is locked by another writer") ||
			!strings.Contains(res.stderr, "weightfs lease break "+url) || !strings.Contains(res.stderr, "pid ") {
			t.Fatalf("second writer: exit %d\n%s", res.code, res.stderr)
		}
		show := mustCLI(t, "lease", "show", url)
		if !strings.Contains(show.stdout, "held by") {
			t.Fatalf("lease show: %s", show.stdout)
		}
	})

	type snap struct{ objects, manifests, all int64 }
	counts := map[string][]snap{} // reader -> per version, after the version was listed
	stats := func(r string) snap {
		st, err := s3.ReadStatsFile(dirs[r+"-cache"])
		if err != nil {
			t.Fatal(err)
		}
		return snap{st.ObjectBytes, st.ManifestBytes, st.ResponseBytes}
	}
	for _, r := range readers {
		counts[r] = append(counts[r], stats(r)) // index 0: before v1
	}

	for v := 1; v <= versions; v++ {
		dst := versionDir(dirs["rw"], v)
		run(t, "cp", "-r", srcDir(work, v), dst)
		if v == outageAt {
			// The seal starts while S3 is down: it waits (retrying with backoff) until the
			// server is back. The readers' polls were backing off meanwhile.
			srv.Stop()
			t.Log("S3 server stopped; sealing v6")
			touch := exec.Command("touch", filepath.Join(dst, "DONE"))
			touched := make(chan error, 1)
			go func() { touched <- touch.Run() }()
			readDuringOutage(t, dirs, want[v-1], readers, 10*time.Second)
			select {
			case err := <-touched:
				t.Fatalf("the seal of v%d returned while S3 was down: %v", v, err)
			default:
			}
			srv.Start()
			back := time.Now()
			t.Log("S3 server started again")
			if err := <-touched; err != nil {
				t.Fatalf("seal of v%d across the outage: %v", v, err)
			}
			t.Logf("v%d sealed %s after the server came back", v, time.Since(back).Round(time.Millisecond))
		} else {
			run(t, "touch", filepath.Join(dst, "DONE")) // returns once the version is in S3
		}
		sealed := time.Now()
		var wg sync.WaitGroup
		took := make([]time.Duration, len(readers))
		for i, r := range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				took[i] = waitListed(versionDir(dirs[r], v), sealed)
			}()
		}
		wg.Wait()
		for i, r := range readers {
			if took[i] < 0 {
				t.Fatalf("%s never listed v%d (waited %s after its seal)", r, v, listPatience)
			}
			sameHashes(t, fmt.Sprintf("%s v%d", r, v), sha256sumTree(t, versionDir(dirs[r], v)), want[v])
			// Every object of v is downloaded once its files were read whole. The reader
			// writes its counters at each poll, so the snapshot waits for a poll after that.
			waitStatsWritten(t, filepath.Join(dirs[r+"-cache"], s3.StatsFileName), time.Now())
			counts[r] = append(counts[r], stats(r))
		}
		t.Logf("v%d: listed by the readers %v after its seal", v, took)
	}

	t.Run("downloads per version", func(t *testing.T) {
		st, err := location.Open(url, location.Options{Options: store.Options{ReadOnly: true, CacheDir: t.TempDir()}})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for v := 2; v <= versions; v++ {
			info, err := st.Version(uint64(v))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range readers {
				a, b := counts[r][v-1], counts[r][v]
				got := (b.objects - a.objects) + (b.manifests - a.manifests)
				dev := math.Abs(float64(got)-float64(info.StoredBytes)) / float64(info.StoredBytes)
				t.Logf("v%d %s: stored %d bytes; downloaded %d object + %d manifest bytes (%+.1f%%), %d bytes of responses in all",
					v, r, info.StoredBytes, b.objects-a.objects, b.manifests-a.manifests, 100*dev, b.all-a.all)
				if dev > 0.10 {
					t.Errorf("v%d %s: downloaded %d bytes for a version that stored %d (%.1f%% off, want within 10%%)", v, r, got, info.StoredBytes, 100*dev)
				}
			}
		}
	})

	t.Run("every version through both readers", func(t *testing.T) {
		for v := 1; v <= versions; v++ {
			sameHashes(t, fmt.Sprintf("ro1 v%d", v), sha256sumTree(t, versionDir(dirs["ro1"], v)), want[v])
		}
		for _, v := range []int{1, outageAt - 1, outageAt} {
			sameHashes(t, fmt.Sprintf("ro2 v%d", v), sha256sumTree(t, versionDir(dirs["ro2"], v)), want[v])
		}
	})
}

// readDuringOutage reads every file of the latest version (the one sealed before the outage)
// through both readers for d: each read gives the written bytes or fails with EIO, never
// other bytes. Served from the readers' materialized copies, they should all succeed.
func readDuringOutage(t *testing.T, dirs map[string]string, latest map[string]string, readers []string, d time.Duration) {
	t.Helper()
	start := time.Now()
	reads, fails := 0, 0
	for time.Since(start) < d {
		for _, r := range readers {
			for name, sum := range latest {
				got, err := fileSHA256(filepath.Join(dirs[r], "latest", name))
				switch {
				case err == nil && got != sum:
					t.Fatalf("%s served wrong bytes of %s during the outage", r, name)
				case err != nil && !errors.Is(err, syscall.EIO):
					t.Fatalf("%s: read of %s during the outage: %v, want the right bytes or EIO", r, name, err)
				case err != nil:
					fails++
				}
				reads++
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("during the outage: %d file reads through the readers, %d failed with EIO, none wrong", reads, fails)
}

// listPatience is how long a reader may take to list a sealed version before the test
// says it never will: far above the poll interval (1 s), so that only a reader that does
// not follow fails, not a slow machine.
const listPatience = 3 * time.Minute

// waitListed waits until path exists (a reader lists the version) and returns how long
// after since that was, or -1 if it still does not after listPatience.
func waitListed(path string, since time.Time) time.Duration {
	for {
		if _, err := os.Stat(path); err == nil {
			return time.Since(since)
		}
		if time.Since(since) > listPatience {
			return -1
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitStatsWritten waits until the counters file at path was written after since (a reader
// rewrites it at every poll).
func waitStatsWritten(t *testing.T, path string, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(listPatience)
	for {
		fi, err := os.Stat(path)
		if err == nil && fi.ModTime().After(since) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written since %s (a reader polls every second): %v", path, since.Format(time.RFC3339Nano), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
