package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricsURL is the endpoint a daemon started with --metrics-addr HOST:0 logged.
func metricsURL(t *testing.T, out *lockedBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`http://[0-9.:\[\]a-z]+/metrics`)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if u := re.FindString(out.String()); u != "" {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("no metrics address in the daemon's output:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape reads url once and parses it with Prometheus's own text parser.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the scrape of %s: %v", url, err)
	}
	return fams
}

// value is the value of the counter or gauge name with labels (name=value pairs), or of a
// histogram's sample count; -1 when there is no such series.
func (s scrape) value(name string, labels ...string) float64 {
	fam := s[name]
	if fam == nil {
		return -1
	}
next:
	for _, m := range fam.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// want fails the test unless series name{labels} has value want.
func (s scrape) want(t *testing.T, what string, want int64, name string, labels ...string) {
	t.Helper()
	if got := s.value(name, labels...); got != float64(want) {
		t.Errorf("%s: %s%v = %v, want %d", what, name, labels, got, want)
	}
}

// fileSizes are the regular files under dir (relative paths) and their sizes.
func fileSizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeOutOfOrder writes data to p second half first: the mount cannot stream such a file and
// stages it.
func writeOutOfOrder(t *testing.T, p string, data []byte) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	half := len(data) / 2
	if _, err := f.WriteAt(data[half:], int64(half)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[:half], 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// metricsLog is `weightfs log --json`, the fields this test compares with the metrics.
type metricsLog struct {
	Versions []struct {
		Version      uint64 `json:"version"`
		Files        int64  `json:"files"`
		LogicalBytes int64  `json:"logical_bytes"`
		StoredBytes  int64  `json:"stored_bytes"`
	} `json:"versions"`
}

// TestMetricsIngestAndFollow scrapes /metrics of a read-write mount while it takes 5
// versions (streamed by cp, staged by out-of-order writes and by a renamed staging
// directory, safetensors and not), and of a read-only mount that follows them and reads
// them; every counter is compared with the store's own numbers (`weightfs log --json`, the
// files written, the bytes read).
func TestMetricsIngestAndFollow(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it reads loose object files (store format 2's layout)
	skipWithoutFUSE(t)
	if _, cli := mountBinary(t); !cli {
		t.Skip("cmd/weightfs does not build: --metrics-addr needs it")
	}
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	rw, ro := rwAndROMountPoints(t, work)
	genCheckpoints(t, work, 200_000, 5)
	rwd := startMount(t, storeDir, rw, "--metrics-addr", "127.0.0.1:0")
	rwURL := metricsURL(t, rwd.out)
	if s := scrapeMetrics(t, rwURL); s.value("go_goroutines") <= 0 || s.value("process_start_time_seconds") <= 0 {
		t.Errorf("the Go and process collectors are missing from the scrape")
	}

	var roURL string
	var rod *mountDaemon
	var logical, filesWritten, streamedWant, stagedAtLeast int64
	sizes := map[int]map[string]int64{} // the files of each version as written
	notes := map[int][]byte{}           // a file that is not safetensors, unique to its version
	for v := 1; v <= 5; v++ {
		src := srcDir(work, v)
		notes[v] = []byte(strings.Repeat(fmt.Sprintf("run notes of version %d\n", v), 1000+v))
		cpFiles := int64(len(fileSizes(t, src)))
		switch v {
		case 3: // built in a staging directory and published by rename: every file staged
			stage := filepath.Join(rw, "stage3")
			run(t, "cp", "-r", src, stage)
			writeOutOfOrder(t, filepath.Join(stage, "notes.txt"), notes[v])
			stagedAtLeast += cpFiles + 1
			run(t, "mv", stage, versionDir(rw, v))
		default: // cp streams; the notes, written out of order, are staged
			run(t, "cp", "-r", src, versionDir(rw, v))
			writeOutOfOrder(t, filepath.Join(versionDir(rw, v), "notes.txt"), notes[v])
			streamedWant += cpFiles
			stagedAtLeast++
			run(t, "touch", filepath.Join(versionDir(rw, v), "DONE"))
		}
		if err := os.WriteFile(filepath.Join(src, "notes.txt"), notes[v], 0o644); err != nil {
			t.Fatal(err)
		}
		sizes[v] = fileSizes(t, src)
		for _, n := range sizes[v] {
			logical += n
			filesWritten++
		}

		// The writer's counters after each seal, against the store's log.
		var lg metricsLog
		if err := json.Unmarshal([]byte(mustCLI(t, "log", "--json", storeDir).stdout), &lg); err != nil {
			t.Fatal(err)
		}
		var logStored, logLogical, logFiles int64
		for _, lv := range lg.Versions {
			logStored += lv.StoredBytes
			logLogical += lv.LogicalBytes
			logFiles += lv.Files
		}
		if len(lg.Versions) != v || logLogical != logical || logFiles != filesWritten {
			t.Fatalf("after version %d: log lists %d versions, %d files, %d logical bytes; wrote %d files, %d bytes",
				v, len(lg.Versions), logFiles, logLogical, filesWritten, logical)
		}
		s := scrapeMetrics(t, rwURL)
		what := fmt.Sprintf("writer after version %d", v)
		s.want(t, what, int64(v), "weightfs_versions_sealed_total")
		s.want(t, what, logical, "weightfs_sealed_logical_bytes_total")
		s.want(t, what, logStored, "weightfs_sealed_stored_bytes_total")
		s.want(t, what, int64(v), "weightfs_seal_duration_seconds")
		s.want(t, what, int64(v), "weightfs_ingest_throughput_bytes_per_second")
		s.want(t, what, int64(v), "weightfs_latest_version")
		streamed, staged := s.value("weightfs_sealed_files_total", "path", "streamed"), s.value("weightfs_sealed_files_total", "path", "staged")
		if streamed+staged != float64(filesWritten) || streamed != float64(streamedWant) || staged < float64(stagedAtLeast) {
			t.Errorf("%s: files streamed %v + staged %v, want %d streamed (cp) + %d staged = %d written",
				what, streamed, staged, streamedWant, filesWritten-streamedWant, filesWritten)
		}

		if v == 1 {
			// A reader that comes after the first version sees the four others arrive.
			rod = startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"),
				"-o", "poll=50ms,metrics_addr=127.0.0.1:0")
			roURL = metricsURL(t, rod.out)
			continue
		}
		deadline := time.Now().Add(2 * time.Minute)
		for scrapeMetrics(t, roURL).value("weightfs_versions_seen_total") < float64(v-1) {
			if time.Now().After(deadline) {
				t.Fatalf("the reader did not see version %d:\n%s", v, scrapeMetrics(t, roURL))
			}
			time.Sleep(20 * time.Millisecond)
		}
		s = scrapeMetrics(t, roURL)
		what = fmt.Sprintf("reader after version %d", v)
		s.want(t, what, int64(v-1), "weightfs_versions_seen_total")
		s.want(t, what, int64(v-1), "weightfs_version_visibility_lag_seconds")
		s.want(t, what, 0, "weightfs_versions_sealed_total")
	}

	// Read every file of every version once through the reader, by how far behind the latest
	// each is: 5 is the latest, 4 one behind, 1-3 two to four behind.
	var wantBytes [3]int64
	for v := 1; v <= 5; v++ {
		bucket := min(5-v, 2)
		for name, size := range sizes[v] {
			got, err := os.ReadFile(filepath.Join(versionDir(ro, v), name))
			if err != nil || int64(len(got)) != size {
				t.Fatalf("read version %d %s: %d bytes, %v; want %d", v, name, len(got), err, size)
			}
			wantBytes[bucket] += size
		}
	}
	s := scrapeMetrics(t, roURL)
	for i, label := range []string{"0", "1", "2-9"} {
		s.want(t, "reader's reads", wantBytes[i], "weightfs_read_bytes_total", "behind", label)
		if s.value("weightfs_read_requests_total", "behind", label) <= 0 {
			t.Errorf("no read requests counted behind=%s", label)
		}
	}
	s.want(t, "reader's reads", 0, "weightfs_read_bytes_total", "behind", "10+")
	if s.value("weightfs_cache_requests_total", "cache", "materialized", "result", "hit") <= 0 {
		t.Errorf("no read served from the reader's materialized copy")
	}
	if s.value("weightfs_fuse_errors_total", "errno", "EIO") > 0 {
		t.Errorf("the reader counted EIO though nothing failed")
	}

	// Damage the notes of version 2 (stored whole, as an object named by the hash of its
	// content) and read them through a fresh reader (the first one has their pages in memory).
	rod.stop()
	sum := sha256.Sum256(notes[2])
	h := hex.EncodeToString(sum[:])
	obj := filepath.Join(storeDir, "objects", h[:2], h)
	data, err := os.ReadFile(obj)
	if err != nil {
		t.Fatalf("the object of version 2's notes: %v", err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.Chmod(obj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(obj, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rod = startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache2"), "--metrics-addr", "127.0.0.1:0")
	roURL = metricsURL(t, rod.out)
	_, err = os.ReadFile(filepath.Join(versionDir(ro, 2), "notes.txt"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of damaged notes: %v, want EIO", err)
	}
	s = scrapeMetrics(t, roURL)
	if got := s.value("weightfs_fuse_errors_total", "errno", "EIO"); got < 1 {
		t.Errorf("EIO counted %v times, the reader got it", got)
	}
	s.want(t, "second reader", 0, "weightfs_versions_seen_total") // all five were there at its start
	if s := scrapeMetrics(t, rwURL); s.value("weightfs_fuse_errors_total", "errno", "EIO") > 0 {
		t.Errorf("the writer counted EIO though nothing failed there")
	}
}

// TestMetricsFollow: a follower started with --metrics-addr counts the versions it put in
// place (the first by a full copy, then one patch each) and the bytes each took, the sizes
// of the files it read from the read-only mount.
func TestMetricsFollow(t *testing.T) {
	work, storeDir, rw, ro, _ := followMounts(t)
	if _, cli := mountBinary(t); !cli {
		t.Skip("cmd/weightfs does not build: follow needs it")
	}
	rod := startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"),
		"--poll", "50ms", "--metrics-addr", "127.0.0.1:0")
	roURL := metricsURL(t, rod.out)
	dir := filepath.Join(work, "follow")
	var f *follower
	var fullBytes, patchBytes int64
	genSeries(t, work, 200_000, 7, 3, func(v int, src string) {
		sealVersion(t, rw, v, src)
		if v == 1 {
			f = startFollower(t, ro, dir, "--metrics-addr", "127.0.0.1:0")
		}
		waitDirVersion(t, dir, uint64(v), f)
		if v == 1 {
			for _, n := range fileSizes(t, versionDir(ro, 1)) {
				fullBytes += n
			}
			return
		}
		fi, err := os.Stat(filepath.Join(ro, "patches", fmt.Sprintf("weight_v%06d.from_v%06d.safetensors", v, v-1)))
		if err != nil {
			t.Fatal(err)
		}
		patchBytes += fi.Size()
	})
	// The follower counts a version just after its state file records it.
	fURL := metricsURL(t, f.out)
	s := scrapeMetrics(t, fURL)
	for deadline := time.Now().Add(10 * time.Second); s.value("weightfs_follow_lag_seconds") < 3 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		s = scrapeMetrics(t, fURL)
	}
	s.want(t, "follower", 1, "weightfs_follow_versions_applied_total", "how", "full")
	s.want(t, "follower", 2, "weightfs_follow_versions_applied_total", "how", "patch")
	s.want(t, "follower", fullBytes, "weightfs_follow_bytes_total", "how", "full")
	s.want(t, "follower", patchBytes, "weightfs_follow_bytes_total", "how", "patch")
	s.want(t, "follower", 3, "weightfs_follow_lag_seconds")
	if s := scrapeMetrics(t, roURL); s.value("weightfs_cache_requests_total", "cache", "render", "result", "miss") < 2 {
		t.Errorf("the reader rendered fewer than the 2 patches the follower read: %v", s.value("weightfs_cache_requests_total", "cache", "render", "result", "miss"))
	}
}
