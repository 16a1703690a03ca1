package metrics

import (
	"strconv"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/weightfs/weightfs/fs"
	"github.com/weightfs/weightfs/store"
)

// A collector reads a source's cumulative counts at scrape time and reports them as const
// metrics: what a scrape shows is what the source counted.

// scrapeCollector is a prometheus.Collector of fixed descriptions whose values collect reads.
type scrapeCollector struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
}

func (c *scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *scrapeCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v int64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// StoreSource is what the store collector reads (an open *store.Store provides all of it).
type StoreSource interface {
	Stats() store.Stats
	Versions() []store.VersionInfo
}

// AddStore exports the counts of an open store: seals, the bytes and files they took,
// versions a reader found, the caches of reads, and the version list's size; and, where s3
// (nil: none) says the store is in S3 (ok true), its S3 traffic and object cache.
func (m *Metrics) AddStore(src StoreSource, s3 func() (S3Stats, bool)) {
	if s3 == nil {
		s3 = func() (S3Stats, bool) { return S3Stats{}, false }
	}
	m.addS3(s3)
	var (
		sealed   = desc("versions_sealed_total", "Versions this process sealed (their manifests are durable).")
		logical  = desc("sealed_logical_bytes_total", "Sum of the file sizes of the versions this process sealed.")
		stored   = desc("sealed_stored_bytes_total", "Bytes of the objects the seals of this process added to the store (what weightfs log shows as STORED).")
		files    = desc("sealed_files_total", "Files of the versions this process sealed, by how they were ingested: streamed (diffed as written) or staged (ingested whole at the seal).", "path")
		seen     = desc("versions_seen_total", "Versions sealed by another process that this reader found after it opened the store.")
		versions = desc("versions", "Sealed versions the store lists now.")
		latest   = desc("latest_version", "Number of the newest sealed version (0: none).")
		cache    = desc("cache_requests_total", "Lookups of the caches that serve reads, by cache (materialized, page, render; s3_object with an S3 store) and result (hit, miss).", "cache", "result")
		retDrop  = desc("retention_dropped_versions_total", "Versions the writer's retention (--keep-last) dropped.")
		retDefer = desc("retention_deferred_total", "Retention runs that kept versions for now: dropping them would have re-anchored more bytes than it frees.")
		retWrite = desc("retention_written_bytes_total", "Bytes of whole copies the writer's retention wrote re-anchoring kept deltas (its cost).")
		retFreed = desc("retention_freed_bytes", "Bytes the writer's retention freed since the daemon started: deleted less what re-anchoring added (negative: the store grew).")
		fsyncs   = desc("fsyncs_total", "Fsyncs of files and directories in the store made by this process (a local store: objects, their directories, manifests, records; 0 in S3).")
		ixWrites = desc("index_writes_total", "Read-write transactions of the node-local index (bbolt fsyncs its file twice in each).")
	)
	m.reg.MustRegister(&scrapeCollector{
		descs: []*prometheus.Desc{sealed, logical, stored, files, seen, versions, latest, cache, retDrop, retDefer, retWrite, retFreed, fsyncs, ixWrites},
		collect: func(ch chan<- prometheus.Metric) {
			st := src.Stats()
			counter(ch, sealed, st.VersionsSealed)
			counter(ch, logical, st.SealedLogicalBytes)
			counter(ch, stored, st.SealedStoredBytes)
			counter(ch, files, st.FilesStreamed, "streamed")
			counter(ch, files, st.FilesStaged, "staged")
			counter(ch, seen, st.VersionsSeen)
			counter(ch, retDrop, st.RetentionDroppedVersions)
			counter(ch, retDefer, st.RetentionDeferred)
			counter(ch, retWrite, st.RetentionWrittenBytes)
			gauge(ch, retFreed, float64(st.RetentionFreedBytes))
			counter(ch, fsyncs, st.Fsyncs)
			counter(ch, ixWrites, st.IndexWrites)
			vs := src.Versions()
			gauge(ch, versions, float64(len(vs)))
			top := uint64(0)
			if len(vs) > 0 {
				top = vs[len(vs)-1].Number
			}
			gauge(ch, latest, float64(top))
			for _, c := range []struct {
				name         string
				hits, misses int64
			}{
				{"materialized", st.CopyHits, st.CopyMisses},
				{"page", st.PageHits, st.PageMisses},
				{"render", st.RenderHits, st.RenderMisses},
			} {
				counter(ch, cache, c.hits, c.name, "hit")
				counter(ch, cache, c.misses, c.name, "miss")
			}
			if s, ok := s3(); ok {
				// A miss of the object cache is a whole object or pack fetched into it.
				counter(ch, cache, s.CacheHits, "s3_object", "hit")
				counter(ch, cache, s.Downloads+s.Packs, "s3_object", "miss")
			}
		},
	})
}

// AddMount exports the counts of a mount: reads by how far behind the latest version they
// are, and the errnos it returned.
func (m *Metrics) AddMount(stats func() fs.Stats) {
	var (
		reqs   = desc("read_requests_total", `READ requests answered from files of sealed versions, by how many sealed versions are newer than the one read ("0": the latest; "1", "2-9", "10+").`, "behind")
		bytes  = desc("read_bytes_total", "Bytes those READ requests returned, by the same behind buckets.", "behind")
		errnos = desc("fuse_errors_total", "Operations the mount failed or refused, by the errno it returned to the kernel (EIO is damage or a failed store read; EPERM, EROFS a change of something immutable).", "errno")
	)
	m.reg.MustRegister(&scrapeCollector{
		descs: []*prometheus.Desc{reqs, bytes, errnos},
		collect: func(ch chan<- prometheus.Metric) {
			st := stats()
			for i, label := range fs.BehindLabels {
				counter(ch, reqs, st.ReadRequests[i], label)
				counter(ch, bytes, st.ReadBytes[i], label)
			}
			for _, e := range st.Errnos() {
				counter(ch, errnos, st.Errors[e], errnoLabel(e))
			}
		},
	})
}

// errnoLabel is the symbolic name of an errno ("EIO"), the form operators grep for; a
// number where the system has no name for it.
func errnoLabel(e syscall.Errno) string {
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return strconv.Itoa(int(e))
}
