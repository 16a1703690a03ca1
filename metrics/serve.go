package metrics

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// What one client may hold of the endpoint is bounded: a scraper that opens connections and
// leaves them idle (or a client that sends a request a byte at a time) would otherwise keep
// each one, with its buffers and a file descriptor, for as long as it likes (20,000 idle
// connections held 974 MB and all but 88 of the process's descriptors). So the server times
// out a request's headers and body, its response, and a kept-alive connection left idle, and
// holds at most maxConns connections at once: one beyond the cap waits in the kernel's accept
// queue, unanswered, until another closes (netutil.LimitListener). Prometheus scrapes every
// few seconds over one kept-alive connection per target, far inside all of these.

// serveLimits bound what clients of the endpoint may hold.
type serveLimits struct {
	maxConns                  int
	header, read, write, idle time.Duration
	connState                 func(net.Conn, http.ConnState) // tests watch connections
}

// defaultServeLimits are the endpoint's bounds (docs/operations.md, "Metrics").
var defaultServeLimits = serveLimits{
	maxConns: 64,
	header:   5 * time.Second,
	read:     10 * time.Second,
	write:    30 * time.Second, // a scrape of a large store's series is well under a second
	idle:     60 * time.Second, // above Prometheus's longest usual scrape interval
}

func (m *Metrics) serve(addr string, l serveLimits) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	s := &Server{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: l.header,
			ReadTimeout:       l.read,
			WriteTimeout:      l.write,
			IdleTimeout:       l.idle,
			MaxHeaderBytes:    16 << 10,
			ConnState:         l.connState,
		},
		addr: ln.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(netutil.LimitListener(ln, l.maxConns)); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s, nil
}

// Loopback reports whether the endpoint listens on a loopback address only (a daemon logs a
// warning otherwise: whoever reaches the port reads the series).
func (s *Server) Loopback() bool {
	tcp, ok := s.addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
