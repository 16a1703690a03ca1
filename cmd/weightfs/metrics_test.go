package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/metrics"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
)

// gathered is the value of the counter name{labels} (name=value pairs) in fams; -1 if absent.
func gathered(fams []*dto.MetricFamily, name string, labels ...string) float64 {
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	next:
		for _, m := range fam.Metric {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.Label {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
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
			}
		}
	}
	return -1
}

// TestMetricsS3EqualStoreCounts: the S3 series of a reader of an S3 store are the store's
// own traffic counters (read through s3MetricsSource), and the writer's seal series are what
// its Commit reported.
func TestMetricsS3EqualStoreCounts(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	url := "s3://weightfs-test/metrics"
	if err := location.Init(url, false, location.Options{}); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	files := map[string][]byte{
		"a.bin":     bytes.Repeat([]byte("weights "), 40_000),
		"sub/b.txt": []byte("config"),
	}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	w, err := location.Open(url, location.Options{Options: store.Options{CacheDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	wm := metrics.New()
	wm.AddStore(w, s3MetricsSource(w))
	info, err := w.Commit(src, store.CommitOptions{})
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	fams, err := wm.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   int64
	}{
		{"weightfs_versions_sealed_total", nil, 1},
		{"weightfs_sealed_logical_bytes_total", nil, info.LogicalBytes},
		{"weightfs_sealed_stored_bytes_total", nil, info.StoredBytes},
		{"weightfs_sealed_files_total", []string{"path", "staged"}, int64(len(files))},
		{"weightfs_sealed_files_total", []string{"path", "streamed"}, 0},
	} {
		if got := gathered(fams, c.name, c.labels...); got != float64(c.want) {
			t.Errorf("writer: %s%v = %v, want %d", c.name, c.labels, got, c.want)
		}
	}
	if gathered(fams, "weightfs_s3_uploads_total") <= 0 {
		t.Errorf("writer: no S3 uploads counted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// A reader does nothing in the background: between a gather and S3Stats nothing moves.
	// The first reader downloads what it reads (the version's pack, store format 3: one
	// pack download, a miss of the object cache); a second reader on the same cache
	// directory opens it from the object cache (a hit), downloading nothing.
	cacheDir := t.TempDir()
	for i, name := range []string{"first reader", "second reader"} {
		r, err := location.Open(url, location.Options{Options: store.Options{ReadOnly: true, CacheDir: cacheDir}})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			for p, want := range files {
				f, err := r.OpenFile(1, p)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, f.Size())
				if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s: read %s: %v", name, p, err)
				}
				f.Close()
			}
		}
		rm := metrics.New()
		rm.AddStore(r, s3MetricsSource(r))
		if fams, err = rm.Registry().Gather(); err != nil {
			t.Fatal(err)
		}
		st, ok := location.S3Stats(r)
		if !ok || st.Requests <= 0 {
			t.Fatalf("S3Stats: %+v, %v", st, ok)
		}
		for _, c := range []struct {
			name   string
			labels []string
			want   int64
		}{
			{"weightfs_s3_requests_total", nil, st.Requests},
			{"weightfs_s3_response_bytes_total", nil, st.ResponseBytes},
			{"weightfs_s3_downloads_total", []string{"kind", "object"}, st.ObjectDownloads},
			{"weightfs_s3_downloads_total", []string{"kind", "pack"}, st.PackDownloads},
			{"weightfs_s3_download_bytes_total", []string{"kind", "object"}, st.ObjectBytes},
			{"weightfs_s3_downloads_total", []string{"kind", "manifest"}, st.ManifestDownloads},
			{"weightfs_s3_download_bytes_total", []string{"kind", "manifest"}, st.ManifestBytes},
			{"weightfs_s3_uploads_total", nil, st.Uploads},
			{"weightfs_s3_retries_total", nil, st.Retries},
			{"weightfs_s3_failures_total", nil, st.Failures},
			{"weightfs_cache_requests_total", []string{"cache", "s3_object", "result", "hit"}, st.CacheHits},
			{"weightfs_cache_requests_total", []string{"cache", "s3_object", "result", "miss"}, st.ObjectDownloads + st.PackDownloads},
		} {
			if got := gathered(fams, c.name, c.labels...); got != float64(c.want) {
				t.Errorf("%s: %s%v = %v, want %d (the store's count)", name, c.name, c.labels, got, c.want)
			}
		}
		downloads := st.ObjectDownloads + st.PackDownloads
		if i == 0 && (downloads <= 0 || st.ObjectBytes <= 0) {
			t.Errorf("%s: %d objects and %d packs downloaded (%d bytes); want some", name, st.ObjectDownloads, st.PackDownloads, st.ObjectBytes)
		}
		if i == 1 && (downloads != 0 || st.CacheHits <= 0) {
			t.Errorf("%s: %d objects and %d packs downloaded, %d cache hits; want none downloaded, hits", name, st.ObjectDownloads, st.PackDownloads, st.CacheHits)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
