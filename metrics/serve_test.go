package metrics

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// connWatch counts the endpoint's open connections as the server sees them (http.ConnState)
// and remembers the most it ever held.
type connWatch struct {
	mu       sync.Mutex
	open     map[net.Conn]bool
	most     int
	accepted int
}

func (w *connWatch) state(c net.Conn, st http.ConnState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch st {
	case http.StateNew:
		w.open[c] = true
		w.accepted++
		w.most = max(w.most, len(w.open))
	case http.StateClosed, http.StateHijacked:
		delete(w.open, c)
	}
}

func (w *connWatch) counts() (open, most, accepted int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.open), w.most, w.accepted
}

// scrapeOn sends GET /metrics on conn and returns the response's status line (keep-alive:
// the connection stays open).
func scrapeOn(conn net.Conn, r *bufio.Reader) (string, error) {
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Status, err
}

// TestServeBoundsConnections: the endpoint never holds more connections than its cap (one
// beyond it is not accepted, and not answered, while the others are held), closes connections
// that sit idle (never sent a request, or kept alive after one), and then answers a real
// scrape. Waits have generous deadlines; nothing asserts how fast.
func TestServeBoundsConnections(t *testing.T) {
	const maxConns = 4
	w := &connWatch{open: map[net.Conn]bool{}}
	m := New()
	srv, err := m.serve("127.0.0.1:0", serveLimits{
		maxConns: maxConns, header: 300 * time.Millisecond, idle: 300 * time.Millisecond,
		read: 5 * time.Second, write: 5 * time.Second, connState: w.state,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	addr := srv.Addr().String()

	// maxConns idle connections: half kept alive after a scrape, half never sending a byte.
	var held []net.Conn
	for i := 0; i < maxConns; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i%2 == 0 {
			if status, err := scrapeOn(c, bufio.NewReader(c)); err != nil || status != "200 OK" {
				t.Fatalf("scrape %d: %q, %v", i, status, err)
			}
		}
		held = append(held, c)
	}
	// One more: the kernel queues it, the server must not take it while the others are held.
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extraResp := make(chan error, 1)
	go func() {
		extra.SetDeadline(time.Now().Add(2 * time.Minute))
		status, err := scrapeOn(extra, bufio.NewReader(extra))
		if err == nil && status != "200 OK" {
			err = errors.New(status)
		}
		extraResp <- err
	}()

	// The server closes every idle connection: each reads EOF (or a reset), never data.
	for i, c := range held {
		c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		n, err := c.Read(make([]byte, 1))
		if n != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("idle connection %d: read %d bytes, %v; want the server to close it", i, n, err)
		}
	}
	// Once they are gone, the connection that waited is answered.
	if err := <-extraResp; err != nil {
		t.Fatalf("the scrape beyond the cap, once the idle connections were closed: %v", err)
	}
	if _, most, accepted := w.counts(); most > maxConns || accepted != maxConns+1 {
		t.Errorf("the server held up to %d connections at once (cap %d), accepted %d", most, maxConns, accepted)
	}
	// And a plain scrape works.
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Get(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "go_goroutines") {
		t.Errorf("scrape: %s, %d bytes", resp.Status, len(body))
	}
}
