package main

import (
	"github.com/weightfs/weightfs/fs"
	"github.com/weightfs/weightfs/metrics"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
)

// The daemons' Prometheus endpoint (--metrics-addr on mount and follow): package metrics
// owns the series; this file wires the sources of one process to it. Every method is a
// no-op on a nil *daemonMetrics (the endpoint is off by default).

const metricsAddrUsage = "serve Prometheus metrics at http://HOST:PORT/metrics (off by default; port 0 picks a free one, logged; docs/operations.md lists the series)"

// daemonMetrics is one daemon's registry and endpoint; nil when --metrics-addr is not given.
type daemonMetrics struct {
	m   *metrics.Metrics
	srv *metrics.Server
}

// startMetrics opens the endpoint at addr ("": none) before anything is mounted, so a bad
// address fails the command at once; it logs the URL (with the port chosen for port 0).
func startMetrics(e *env, addr string) (*daemonMetrics, func(), error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	m := metrics.New()
	srv, err := m.Serve(addr)
	if err != nil {
		return nil, nil, err
	}
	e.log.Info("metrics at " + srv.URL())
	if !srv.Loopback() {
		e.log.Warn("the metrics endpoint listens beyond this host: whoever reaches " + srv.Addr().String() +
			" reads the series (bind it to 127.0.0.1, or a private interface a firewall guards; docs/operations.md, \"Metrics\")")
	}
	return &daemonMetrics{m: m, srv: srv}, func() {
		if err := srv.Close(); err != nil {
			e.log.Warn("metrics endpoint: close", "err", err)
		}
	}, nil
}

// storeObserver is the store.Options.Observer that fills the histograms (nil: none).
func (d *daemonMetrics) storeObserver() store.Observer {
	if d == nil {
		return nil
	}
	return d.m.StoreObserver()
}

func (d *daemonMetrics) addStore(st *store.Store) {
	if d != nil {
		d.m.AddStore(st, s3MetricsSource(st))
	}
}

func (d *daemonMetrics) addMount(srv *fs.Server) {
	if d != nil {
		d.m.AddMount(srv.Stats)
	}
}

func (d *daemonMetrics) follower() *metrics.Follower {
	if d == nil {
		return nil
	}
	return d.m.Follower()
}

// s3MetricsSource is the one place that reads an S3 store's traffic counters for the
// metrics: it maps the store's own counters onto metrics.S3Stats (ok false: not in S3).
func s3MetricsSource(st *store.Store) func() (metrics.S3Stats, bool) {
	return func() (metrics.S3Stats, bool) {
		s, ok := location.S3Stats(st)
		if !ok {
			return metrics.S3Stats{}, false
		}
		return metrics.S3Stats{
			Requests: s.Requests, ResponseBytes: s.ResponseBytes,
			Uploads: s.Uploads, UploadBytes: s.UploadBytes,
			Downloads: s.ObjectDownloads, Packs: s.PackDownloads, DownloadBytes: s.ObjectBytes,
			Manifests: s.ManifestDownloads, ManifestBytes: s.ManifestBytes,
			Retries: s.Retries, Failures: s.Failures, CacheHits: s.CacheHits,
		}, true
	}
}
