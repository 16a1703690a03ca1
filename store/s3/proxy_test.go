package s3

import (
	"io"
	"net"
	"sync"
	"testing"
)

// flakyProxy forwards TCP connections on loopback to a server and can be switched off: then
// it closes every open connection and refuses (accepts and drops) new ones, as an object store
// that went away does. Only loopback addresses are involved.
type flakyProxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func startFlakyProxy(t testing.TB, target string) *flakyProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyProxy{l: l, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.setDown(true)
	})
	return p
}

func (p *flakyProxy) addr() string { return p.l.Addr().String() }

func (p *flakyProxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
			delete(p.conns, c)
		}
	}
}

func (p *flakyProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *flakyProxy) serve() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil || !p.track(out) {
			in.Close()
			if out != nil {
				out.Close()
			}
			continue
		}
		go func() {
			io.Copy(out, in)
			out.Close()
		}()
		go func() {
			io.Copy(in, out)
			in.Close()
		}()
	}
}
