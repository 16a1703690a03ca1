package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/testfiles"
)

// objectBytes sums the sizes of the object files under STORE/objects (what du counts).
var objectBytes = testfiles.ObjectBytes

// storeLog is `weightfs log --json`, the fields these tests use.
type storeLog struct {
	Versions []struct {
		Version   uint64 `json:"version"`
		DiskBytes int64  `json:"disk_bytes"`
	} `json:"versions"`
	Total struct {
		DiskBytes         int64 `json:"disk_bytes"`
		UnreferencedBytes int64 `json:"unreferenced_bytes"`
	} `json:"total"`
}

func readLog(t *testing.T, storeDir string) (storeLog, []uint64) {
	t.Helper()
	var lg storeLog
	if err := json.Unmarshal([]byte(mustCLI(t, "log", "--json", storeDir).stdout), &lg); err != nil {
		t.Fatal(err)
	}
	var vs []uint64
	for _, v := range lg.Versions {
		vs = append(vs, v.Version)
	}
	return lg, vs
}

// checkLogTotal: log's total is the objects' size, and the versions' share plus what no
// version needs add up to it.
func checkLogTotal(t *testing.T, storeDir string) {
	t.Helper()
	lg, _ := readLog(t, storeDir)
	var sum int64
	for _, v := range lg.Versions {
		sum += v.DiskBytes
	}
	if files := objectBytes(t, storeDir); lg.Total.DiskBytes != files || sum+lg.Total.UnreferencedBytes != files {
		t.Fatalf("log: total %d, versions %d + unreferenced %d; object files %d bytes", lg.Total.DiskBytes, sum, lg.Total.UnreferencedBytes, files)
	}
}

// TestRetentionKeepLastWhileTraining: a read-write mount with --keep-last 3 --keep-exact takes 10
// versions while a read-only mount's reader reads the latest; the store keeps exactly the
// last 3, each exports bit-identically, and log's total is the size of the object files.
func TestRetentionKeepLastWhileTraining(t *testing.T) {
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	rw, ro := rwAndROMountPoints(t, work)
	writer := startMount(t, storeDir, rw, "--keep-last", "3", "--keep-exact")
	var reader *mountDaemon
	var stop atomic.Bool
	var wg sync.WaitGroup
	var readErr error
	var reads atomic.Int64
	want := genSeries(t, work, 1_000_000, 31, 10, func(v int, src string) {
		run(t, "cp", "-r", src, versionDir(rw, v))
		run(t, "touch", filepath.Join(versionDir(rw, v), "DONE"))
		if v != 1 {
			return
		}
		reader = startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"), "--poll", "100ms")
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The reader reads whatever is latest; a version gc removes under it may read
			// ENOENT (and is then gone from the listing), never EIO or wrong bytes.
			for !stop.Load() {
				dir := filepath.Join(ro, "latest")
				ents, err := os.ReadDir(dir)
				if err != nil {
					continue
				}
				for _, e := range ents {
					b, err := os.ReadFile(filepath.Join(dir, e.Name()))
					if err != nil && !errors.Is(err, syscall.ENOENT) {
						readErr = fmt.Errorf("read %s: %w", e.Name(), err)
						return
					}
					if err == nil && len(b) > 0 {
						reads.Add(1)
					}
				}
			}
		}()
	})
	// The last retention gc runs after the last seal, in the background.
	var versions []uint64
	for deadline := time.Now().Add(hangLimit); ; time.Sleep(100 * time.Millisecond) {
		if _, versions = readLog(t, storeDir); slices.Equal(versions, []uint64{8, 9, 10}) || time.Now().After(deadline) {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	if readErr != nil {
		t.Fatalf("reader: %v", readErr)
	}
	if !slices.Equal(versions, []uint64{8, 9, 10}) {
		t.Fatalf("the store keeps versions %v, want [8 9 10]\n%s", versions, writer.out.String())
	}
	if !strings.Contains(writer.out.String(), "retention: kept versions") {
		t.Fatalf("the writer's log does not say what retention did:\n%s", writer.out.String())
	}
	t.Logf("the reader read %d files", reads.Load())
	for _, v := range versions {
		out := filepath.Join(t.TempDir(), "export")
		mustCLI(t, "export", storeDir, strconv.FormatUint(v, 10), out)
		sameHashes(t, fmt.Sprintf("export of v%d", v), treeHashes(t, out), want[int(v)])
		sameHashes(t, fmt.Sprintf("v%d through the read-only mount", v), sha256sumTree(t, versionDir(ro, int(v))), want[int(v)])
	}
	reader.stop()
	writer.stop()
	checkLogTotal(t, storeDir)
	verifyStore(t, storeDir)
}

// TestPinnedReaderSurvivesGC: a read-only mount of version 2 pins it; gc --keep-last 1 keeps
// it, and the mount reads it bit-identically. Once the mount is gone, so is its pin; a file of
// v2 open on a mount without a pin holds v2 while it is open, and gc drops v2 once it is
// closed. (A read of a version gc removed under a reader without a pin, as on S3, fails with
// ENOENT and a log line naming gc: store's TestReadOfAVersionGCRemovedIsNotDamage.)
func TestPinnedReaderSurvivesGC(t *testing.T) {
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	want := genSeries(t, work, 1_000_000, 37, 5, func(v int, src string) {
		mustCLI(t, "commit", storeDir, src)
	})
	pinned, plain := filepath.Join(work, "pinned"), filepath.Join(work, "plain")
	for _, d := range []string{pinned, plain} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pm := startMount(t, storeDir, pinned, "--read-only", "--version", "2", "--cache-dir", filepath.Join(work, "pinned-cache"))
	pins, _ := filepath.Glob(filepath.Join(storeDir, "pins", "*.json"))
	if len(pins) != 1 {
		t.Fatalf("pin records after a pinned mount: %v\n%s", pins, pm.out.String())
	}
	r := mustCLI(t, "gc", "--keep-last", "1", storeDir)
	if _, vs := readLog(t, storeDir); !slices.Equal(vs, []uint64{2, 5}) || !strings.Contains(r.stdout, "kept versions [2] for readers' pins") {
		t.Fatalf("gc --keep-last 1 with v2 pinned keeps %v:\n%s", vs, r.stdout)
	}
	sameHashes(t, "pinned v2 after gc", sha256sumTree(t, pinned), want[2])
	checkLogTotal(t, storeDir)

	pm.stop()
	if pins, _ := filepath.Glob(filepath.Join(storeDir, "pins", "*.json")); len(pins) != 0 {
		t.Fatalf("pin records after the pinned mount ended: %v", pins)
	}
	// A mount without --version pins no version, but a file of v2 open on it holds v2 (a pin
	// while it is open): gc keeps v2 and the file reads exact; once it is closed, gc drops v2.
	um := startMount(t, storeDir, plain, "--read-only", "--cache-dir", filepath.Join(work, "plain-cache"), "--poll", "100ms")
	shards, _ := filepath.Glob(filepath.Join(versionDir(plain, 2), "*.safetensors"))
	if len(shards) == 0 {
		t.Fatal("no shard in v2")
	}
	f, err := os.Open(shards[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r = mustCLI(t, "gc", "--keep-last", "1", storeDir)
	if _, vs := readLog(t, storeDir); !slices.Equal(vs, []uint64{2, 5}) || !strings.Contains(r.stdout, "kept versions [2] for readers' pins") {
		t.Fatalf("gc --keep-last 1 with a file of v2 open keeps %v:\n%s\n%s", vs, r.stdout, um.out.String())
	}
	h := &heldFile{what: "a file of v2 open on a mount without --version", f: f}
	if got, err := h.fdSHA256(); err != nil || got != want[2][filepath.Base(shards[0])] {
		t.Fatalf("%s after gc: sha256 %s, %v", h.what, got, err)
	}
	f.Close()
	for deadline := time.Now().Add(hangLimit); ; time.Sleep(50 * time.Millisecond) {
		if pins, _ := filepath.Glob(filepath.Join(storeDir, "pins", "*.json")); len(pins) == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("pin records after the file was closed: %v\n%s", pins, um.out.String())
		}
	}
	mustCLI(t, "gc", "--keep-last", "1", storeDir)
	if _, vs := readLog(t, storeDir); !slices.Equal(vs, []uint64{5}) {
		t.Fatalf("gc after the file was closed keeps %v", vs)
	}
	sameHashes(t, "v5", sha256sumTree(t, versionDir(plain, 5)), want[5])
	checkLogTotal(t, storeDir)
}

// TestGCDryRunCLI: gc --dry-run changes no byte of the store and predicts what gc then does.
func TestGCDryRunCLI(t *testing.T) {
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	genSeries(t, work, 1_000_000, 41, 6, func(v int, src string) {
		mustCLI(t, "commit", storeDir, src)
	})
	before := storeTreeHashes(t, storeDir)
	dry := mustCLI(t, "gc", "--dry-run", "--keep-last", "2", "--keep-every", "3", storeDir).stdout
	if after := storeTreeHashes(t, storeDir); !mapsEqual(before, after) {
		t.Fatalf("gc --dry-run changed the store:\n%s", dry)
	}
	m := regexp.MustCompile(`would drop (\d+) versions \[([\d ]*)\].*\n.*would delete (\d+) objects \(.*, (\d+) bytes\), re-anchor (\d+) objects`).FindStringSubmatch(dry)
	if m == nil || m[2] != "1 2 4" {
		t.Fatalf("gc --dry-run output:\n%s", dry)
	}
	bytesBefore := objectBytes(t, storeDir)
	real := mustCLI(t, "gc", "--keep-last", "2", "--keep-every", "3", storeDir).stdout
	g := regexp.MustCompile(`dropped (\d+) versions, deleted (\d+) objects \(.*, (\d+) bytes\), re-anchored (\d+) objects \(adding (-?\d+) bytes\)`).FindStringSubmatch(real)
	if g == nil || g[1] != m[1] || g[2] != m[3] || g[3] != m[4] || g[4] != m[5] {
		t.Fatalf("gc --dry-run predicted\n%s\ngc did\n%s", dry, real)
	}
	deleted, _ := strconv.ParseInt(g[3], 10, 64)
	added, _ := strconv.ParseInt(g[5], 10, 64)
	if got := bytesBefore - objectBytes(t, storeDir); got != deleted-added {
		t.Fatalf("the objects shrank by %d bytes; gc says %d deleted, %d added", got, deleted, added)
	}
	if _, vs := readLog(t, storeDir); !slices.Equal(vs, []uint64{3, 5, 6}) {
		t.Fatalf("gc --keep-last 2 --keep-every 3 keeps %v", vs)
	}
	checkLogTotal(t, storeDir)
}

// storeTreeHashes hashes every file of a store but its node-local cache.
func storeTreeHashes(t *testing.T, storeDir string) map[string]string {
	t.Helper()
	all := treeHashes(t, storeDir)
	for p := range all {
		if strings.HasPrefix(p, "cache/") {
			delete(all, p)
		}
	}
	return all
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
