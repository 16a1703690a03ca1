package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Follower counts what `weightfs follow` does: the versions it brought its directory to, by
// how (a patch, or a full copy), the bytes that took, and the lag from each version's seal
// to its being in place.
type Follower struct {
	versions *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	lag      prometheus.Histogram
}

// Follower registers and returns the follow metrics.
func (m *Metrics) Follower() *Follower {
	f := &Follower{
		versions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "follow_versions_applied_total",
			Help: "Versions the follower put in place in its directory, by how: patch (a catch-up patch applied in place) or full (a full copy).",
		}, []string{"how"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "follow_bytes_total",
			Help: "Bytes the follower read from the mount to put versions in place: the patch files' sizes, or the copied files' sizes.",
		}, []string{"how"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "follow_lag_seconds",
			Help:    "Per version put in place: time from its seal (the version directory's modification time) to its being in place in the follower's directory.",
			Buckets: lagBuckets,
		}),
	}
	for _, how := range []string{"patch", "full"} { // both series exist from the start
		f.versions.WithLabelValues(how)
		f.bytes.WithLabelValues(how)
	}
	m.reg.MustRegister(f.versions, f.bytes, f.lag)
	return f
}

// Applied records a version put in place by how ("patch" or "full") from n bytes; sealed is
// when the version was sealed (zero: unknown, no lag observed). A nil Follower does nothing.
func (f *Follower) Applied(how string, n int64, sealed time.Time) {
	if f == nil {
		return
	}
	f.versions.WithLabelValues(how).Inc()
	f.bytes.WithLabelValues(how).Add(float64(n))
	if !sealed.IsZero() {
		f.lag.Observe(max(0, time.Since(sealed).Seconds()))
	}
}
