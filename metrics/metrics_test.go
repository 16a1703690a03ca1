package metrics

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weightfs/weightfs/fs"
	"github.com/weightfs/weightfs/store"
)

type fakeStore struct{ st store.Stats }

func (f fakeStore) Stats() store.Stats { return f.st }
func (f fakeStore) Versions() []store.VersionInfo {
	return []store.VersionInfo{{Number: 3}, {Number: 7}}
}

// every series of every source, with values the sources gave.
func allSources(t *testing.T) *Metrics {
	t.Helper()
	m := New()
	m.AddStore(fakeStore{store.Stats{VersionsSealed: 2, SealedLogicalBytes: 100, SealedStoredBytes: 7,
		FilesStreamed: 3, FilesStaged: 1, VersionsSeen: 4, CopyHits: 5, CopyMisses: 6, PageHits: 8,
		PageMisses: 9, RenderHits: 10, RenderMisses: 11, Fsyncs: 15, IndexWrites: 16}},
		func() (S3Stats, bool) { return S3Stats{Requests: 12, CacheHits: 13, Downloads: 14, Packs: 3}, true })
	m.AddMount(func() fs.Stats {
		return fs.Stats{ReadRequests: [fs.BehindBuckets]int64{1, 2, 3, 4}, ReadBytes: [fs.BehindBuckets]int64{10, 20, 30, 40},
			Errors: map[syscall.Errno]int64{syscall.EIO: 2, syscall.EROFS: 1}}
	})
	m.Follower().Applied("patch", 50, time.Now())
	m.StoreObserver().Sealed(store.VersionInfo{LogicalBytes: 1 << 30}, time.Second, 2*time.Second)
	m.StoreObserver().Seen(store.VersionInfo{Created: time.Now().Add(-time.Second)}, time.Now())
	return m
}

// TestSeriesFollowConventions: promlint (Prometheus's own checks of names, units, help and
// counter suffixes) finds nothing in any series.
func TestSeriesFollowConventions(t *testing.T) {
	problems, err := testutil.GatherAndLint(allSources(t).Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, namespace+"_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

// TestSeriesAreTheSourcesCounts: each series is what its source counted, and the endpoint
// serves them.
func TestSeriesAreTheSourcesCounts(t *testing.T) {
	m := allSources(t)
	want := `
# HELP weightfs_fuse_errors_total Operations the mount failed or refused, by the errno it returned to the kernel (EIO is damage or a failed store read; EPERM, EROFS a change of something immutable).
# TYPE weightfs_fuse_errors_total counter
weightfs_fuse_errors_total{errno="EIO"} 2
weightfs_fuse_errors_total{errno="EROFS"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "weightfs_fuse_errors_total"); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		name string
		want int
	}{
		{"weightfs_read_requests_total", 4}, {"weightfs_read_bytes_total", 4}, {"weightfs_cache_requests_total", 8},
		{"weightfs_sealed_files_total", 2}, {"weightfs_s3_downloads_total", 3}, {"weightfs_follow_versions_applied_total", 2},
	} {
		if n, err := testutil.GatherAndCount(m.Registry(), c.name); err != nil || n != c.want {
			t.Errorf("%s: %d series (%v), want %d", c.name, n, err, c.want)
		}
	}
	srv, err := m.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`weightfs_read_bytes_total{behind="10+"} 40`,
		`weightfs_cache_requests_total{cache="s3_object",result="miss"} 17`, // objects and packs downloaded
		`weightfs_s3_downloads_total{kind="pack"} 3`,
		`weightfs_latest_version 7`,
		`weightfs_versions 2`,
		`weightfs_sealed_stored_bytes_total 7`,
		`weightfs_fsyncs_total 15`,
		`weightfs_index_writes_total 16`,
		`weightfs_seal_duration_seconds_count 1`,
		`weightfs_version_visibility_lag_seconds_count 1`,
		`weightfs_follow_bytes_total{how="patch"} 50`,
	} {
		if !strings.Contains(string(body), line+"\n") {
			t.Errorf("the scrape lacks %q", line)
		}
	}
}
