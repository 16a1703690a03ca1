// Package metrics owns weightfs's Prometheus metrics: the series a daemon (`weightfs mount`,
// read-write or read-only, and `weightfs follow`) exports at /metrics when started with
// --metrics-addr, their names, types, labels and help, and the HTTP endpoint that serves
// them. docs/operations.md ("Metrics") lists every series.
//
// The store and fs packages know nothing of Prometheus. They count what they do (store.Stats,
// fs.Stats, the S3 traffic counters) where they do it, and a prometheus.Collector here reads
// those counts at every scrape: a counter is what the store or the mount did, by construction,
// never a second count kept beside it. What needs each event as it happens (histograms of
// seal latency, ingest throughput and the lag from a seal to a reader's seeing it) comes
// through store.Observer, which Metrics.StoreObserver implements. Each Metrics has its own
// registry (with the Go runtime and process collectors), never the global one.
package metrics

import (
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// namespace prefixes every weightfs series.
const namespace = "weightfs"

// Metrics is one process's registry of weightfs metrics. Add the sources the process has
// (AddStore, AddMount, AddS3, Follower), then Serve it.
type Metrics struct {
	reg *prometheus.Registry
	obs *storeObserver
}

// New returns a registry holding the Go runtime and process collectors and weightfs's
// histograms (empty until a store reports to StoreObserver).
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{reg: reg, obs: newStoreObserver()}
	m.obs.register(reg)
	return m
}

// Registry is the registry behind the endpoint (tests gather from it directly).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in Prometheus's exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// Server is a running metrics endpoint.
type Server struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
	err  error
}

// Serve listens on addr (HOST:PORT; port 0 picks a free one) and serves /metrics until
// Close. It returns once the listener is open, so a scrape right after finds it. What one
// client may hold is bounded (serve.go).
func (m *Metrics) Serve(addr string) (*Server, error) {
	return m.serve(addr, defaultServeLimits)
}

// Addr is the address the endpoint listens on (the port chosen, for port 0).
func (s *Server) Addr() net.Addr { return s.addr }

// URL is the endpoint's address as a scrape target would name it.
func (s *Server) URL() string { return "http://" + s.addr.String() + "/metrics" }

// Close stops the endpoint; it returns the error that stopped it earlier, if any.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	if s.err != nil {
		return fmt.Errorf("metrics endpoint: %w", s.err)
	}
	return err
}
