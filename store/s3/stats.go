package s3

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// Stats counts what an S3 store moved since it was opened. A process serving an S3 store
// also keeps the latest counts in CACHE/s3-stats.json (StatsFileName), so that tests and
// operators can read them from outside.
type Stats struct {
	Requests      int64 `json:"requests"`       // HTTP requests sent, retries included
	ResponseBytes int64 `json:"response_bytes"` // every response body: objects, manifests, listings, errors

	ObjectDownloads   int64 `json:"object_downloads"` // whole objects fetched into the cache
	ObjectBytes       int64 `json:"object_bytes"`     // object bytes fetched (whole and ranges)
	ManifestDownloads int64 `json:"manifest_downloads"`
	ManifestBytes     int64 `json:"manifest_bytes"`

	Uploads          int64 `json:"uploads"` // objects, manifests and lease writes
	UploadBytes      int64 `json:"upload_bytes"`
	MultipartUploads int64 `json:"multipart_uploads"`
	// ObjectUploads and ObjectUploadBytes count the objects among the uploads (not manifests,
	// lease or group records): what a writer group's rank stores for its files.
	ObjectUploads     int64 `json:"object_uploads"`
	ObjectUploadBytes int64 `json:"object_upload_bytes"`

	// Packs (store format 3, packs.go): PackUploads and PackUploadBytes count the packs among
	// the uploads, PackDownloads the whole packs fetched into the cache (their bytes are in
	// ObjectBytes), IndexDownloads the pack index records fetched (not served from the cache).
	PackUploads     int64 `json:"pack_uploads"`
	PackUploadBytes int64 `json:"pack_upload_bytes"`
	PackDownloads   int64 `json:"pack_downloads"`
	IndexDownloads  int64 `json:"index_downloads"`

	Retries  int64 `json:"retries"`  // transient errors that were retried
	Failures int64 `json:"failures"` // requests that still failed when the retry time ran out

	// HintRequests counts the looks at the change hint (hint.go: one conditional GET each,
	// most answered 304 with no body); HintChanges those that found it written again.
	HintRequests int64 `json:"hint_requests"`
	HintChanges  int64 `json:"hint_changes"`

	CacheHits      int64 `json:"cache_hits"` // object opens served from the local cache
	CachedObjects  int64 `json:"cached_objects"`
	CachedBytes    int64 `json:"cached_bytes"`
	CacheEvictions int64 `json:"cache_evictions"`
}

// StatsFileName is the file in the cache directory that holds the latest Stats as JSON.
const StatsFileName = "s3-stats.json"

// ReadStatsFile reads the counters another process left in its cache directory.
func ReadStatsFile(cacheDir string) (Stats, error) {
	b, err := os.ReadFile(filepath.Join(cacheDir, StatsFileName))
	if err != nil {
		return Stats{}, fmt.Errorf("read S3 stats: %w", err)
	}
	var st Stats
	if err := json.Unmarshal(b, &st); err != nil {
		return Stats{}, fmt.Errorf("read S3 stats %s: %w", filepath.Join(cacheDir, StatsFileName), err)
	}
	return st, nil
}

// counters are the live counters behind Stats.
type counters struct {
	requests, responseBytes                atomic.Int64
	objectDownloads, objectBytes           int64
	manifestDownloads, manifestBytes       int64
	uploads, uploadBytes, multipartUploads int64
	objectUploads, objectUploadBytes       int64
	packUploads, packUploadBytes           int64
	packDownloads, indexDownloads          int64
	retries, failures                      int64
	cacheHits                              int64
	hintRequests, hintChanges              int64
	mu                                     sync.Mutex
	fileMu                                 sync.Mutex // one writer of the stats file at a time
}

func (c *counters) add(field *int64, n int64) {
	c.mu.Lock()
	*field += n
	c.mu.Unlock()
}

func (c *counters) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{
		Requests: c.requests.Load(), ResponseBytes: c.responseBytes.Load(),
		ObjectDownloads: c.objectDownloads, ObjectBytes: c.objectBytes,
		ManifestDownloads: c.manifestDownloads, ManifestBytes: c.manifestBytes,
		Uploads: c.uploads, UploadBytes: c.uploadBytes, MultipartUploads: c.multipartUploads,
		ObjectUploads: c.objectUploads, ObjectUploadBytes: c.objectUploadBytes,
		PackUploads: c.packUploads, PackUploadBytes: c.packUploadBytes,
		PackDownloads: c.packDownloads, IndexDownloads: c.indexDownloads,
		Retries: c.retries, Failures: c.failures, CacheHits: c.cacheHits,
		HintRequests: c.hintRequests, HintChanges: c.hintChanges,
	}
}

// writeFile replaces dir/StatsFileName with st (temporary file and rename: a reader never
// sees half a file). Errors are ignored: the counters are a diagnostic.
func (c *counters) writeFile(dir string, st Stats) {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return
	}
	c.fileMu.Lock()
	defer c.fileMu.Unlock()
	tmp := filepath.Join(dir, "."+StatsFileName+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), filePerm); err != nil {
		return
	}
	_ = os.Rename(tmp, filepath.Join(dir, StatsFileName))
}

// countingTransport counts requests and response body bytes on their way from the network.
type countingTransport struct {
	base http.RoundTripper
	c    *counters
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.c.requests.Add(1)
	resp, err := t.base.RoundTrip(req)
	if resp != nil && resp.Body != nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &t.c.responseBytes}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
