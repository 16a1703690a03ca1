package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weightfs/weightfs/store"
)

// Bucket bounds of the histograms. Seals of the streaming path take milliseconds, a batch
// seal of a large checkpoint minutes; ingest runs from a few MiB/s (a slow disk, S3) to
// several GiB/s; a reader polls every 0.5 s (1 s for S3) and then brings its copy forward.
var (
	sealBuckets       = prometheus.ExponentialBuckets(0.005, 2, 18) // 5 ms .. 11 min
	throughputBuckets = prometheus.ExponentialBuckets(1<<20, 2, 15) // 1 MiB/s .. 16 GiB/s
	lagBuckets        = prometheus.ExponentialBuckets(0.05, 2, 14)  // 50 ms .. 7 min
)

// storeObserver turns a store's events into histograms (store.Observer).
type storeObserver struct {
	seal       prometheus.Histogram
	throughput prometheus.Histogram
	lag        prometheus.Histogram
}

func newStoreObserver() *storeObserver {
	return &storeObserver{
		seal: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "seal_duration_seconds",
			Help:    "Time the store's seal of a version took, once its files were in: objects synced, manifest written and durable (the last part of what close(DONE) or the publishing rename waits for; staged files are ingested just before it).",
			Buckets: sealBuckets,
		}),
		throughput: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "ingest_throughput_bytes_per_second",
			Help:    "Per sealed version: its logical bytes over the time from its first file to its seal's end.",
			Buckets: throughputBuckets,
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "version_visibility_lag_seconds",
			Help:    "Per version another process sealed: time from its seal (the manifest's creation time) to this reader's listing it.",
			Buckets: lagBuckets,
		}),
	}
}

func (o *storeObserver) register(reg *prometheus.Registry) {
	reg.MustRegister(o.seal, o.throughput, o.lag)
}

func (o *storeObserver) Sealed(info store.VersionInfo, seal, ingest time.Duration) {
	o.seal.Observe(seal.Seconds())
	if ingest > 0 {
		o.throughput.Observe(float64(info.LogicalBytes) / ingest.Seconds())
	}
}

func (o *storeObserver) Seen(info store.VersionInfo, at time.Time) {
	o.lag.Observe(max(0, at.Sub(info.Created).Seconds())) // clocks of two machines may disagree
}

// StoreObserver is what store.Options.Observer should be for the histograms to fill.
func (m *Metrics) StoreObserver() store.Observer { return m.obs }
