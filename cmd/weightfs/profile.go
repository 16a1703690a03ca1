package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
)

// profileEnv names a file to write a CPU profile of the whole command to (go tool pprof): how
// the figures in docs/benchmarks.md were explained, e.g. of a mount under `make bench`.
// SIGUSR2 ends the profile being written and starts the next one, FILE.1, FILE.2, ...: a
// profile of one phase of a long-running daemon (the ingest of one version and what follows
// it, without the versions before).
const profileEnv = "WEIGHTFS_CPUPROFILE"

// startProfile starts the CPU profile profileEnv asks for; the returned function stops it.
func startProfile(e *env) func() {
	path := os.Getenv(profileEnv)
	if path == "" {
		return func() {}
	}
	p := &profiler{path: path, e: e}
	if !p.start(path) {
		return func() {}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR2)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sigs:
				p.next()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		p.stop()
	}
}

// profiler writes the CPU profiles of one command, one file after another.
type profiler struct {
	path string
	e    *env

	mu sync.Mutex
	f  *os.File // the profile being written; nil: none
	n  int      // profiles started after the first
}

// start begins a profile into path; false (and a line on stderr) if it cannot.
func (p *profiler) start(path string) bool {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(p.e.stderr, "weightfs: %s=%s: %v (no profile)\n", profileEnv, path, err)
		if f != nil {
			f.Close()
		}
		return false
	}
	p.f = f
	return true
}

// stop ends the profile being written.
func (p *profiler) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f != nil {
		pprof.StopCPUProfile()
		p.f.Close()
		p.f = nil
	}
}

// next ends the profile being written and starts the next file.
func (p *profiler) next() {
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.start(fmt.Sprintf("%s.%d", p.path, p.n))
}
