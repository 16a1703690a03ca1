package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// procField returns the value of a "Key:   123 kB" line of /proc/PID/status or /proc/meminfo,
// in the file's unit (kB for every memory field).
func procField(b []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || v < 0 {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// memStatus is what the sampler reads from /proc/PID/status, in bytes.
type memStatus struct {
	RssAnon int64 // anonymous resident memory: the heap, stacks, buffers (not the page cache)
	VmRSS   int64 // all resident memory, file-backed mappings included
	VmHWM   int64 // the kernel's peak of VmRSS
}

// parseStatus extracts memStatus from the text of /proc/PID/status. RssAnon and VmRSS must be
// there (Linux >= 4.5); VmHWM is optional.
func parseStatus(b []byte) (memStatus, error) {
	var m memStatus
	anon, ok := procField(b, "RssAnon")
	if !ok {
		return m, fmt.Errorf("no RssAnon line in /proc status (Linux >= 4.5 has it)")
	}
	rss, ok := procField(b, "VmRSS")
	if !ok {
		return m, fmt.Errorf("no VmRSS line in /proc status")
	}
	hwm, _ := procField(b, "VmHWM")
	const kB = 1024
	if anon > 1<<53/kB || rss > 1<<53/kB || hwm > 1<<53/kB {
		return m, fmt.Errorf("memory field out of range in /proc status")
	}
	return memStatus{RssAnon: anon * kB, VmRSS: rss * kB, VmHWM: hwm * kB}, nil
}

// exited reports whether a /proc/PID/status text is that of a process that has exited but not
// been reaped (State Z or X): its memory lines are gone.
func exited(status []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == "State" {
			v = strings.TrimSpace(v)
			return strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X")
		}
	}
	return false
}

// rssPeak is the highest memory a sampler saw over a phase.
type rssPeak struct {
	RssAnon int64 `json:"peak_rss_anon_bytes"`
	VmRSS   int64 `json:"peak_vm_rss_bytes"`
	Samples int   `json:"samples"`
}

// rssSampler reads /proc/PID/status every interval and keeps the peaks. RssAnon is sampled
// (the kernel keeps no high-water mark of it), so a spike shorter than the interval can be
// missed; VmHWM, read at each sample, bounds it from above.
type rssSampler struct {
	path     string
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	mu      sync.Mutex
	phase   rssPeak // since the last Phase call
	total   rssPeak // since the start
	lastHWM int64
	err     error // the first read error other than the process being gone
}

// startRSSSampler samples the process pid until Stop.
func startRSSSampler(pid int, interval time.Duration) *rssSampler {
	s := &rssSampler{path: fmt.Sprintf("/proc/%d/status", pid), stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *rssSampler) sample() {
	b, err := os.ReadFile(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if !os.IsNotExist(err) && s.err == nil {
			s.err = err
		}
		return
	}
	if exited(b) {
		return // a zombie has no memory left to measure; the process is gone
	}
	m, err := parseStatus(b)
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	for _, p := range []*rssPeak{&s.phase, &s.total} {
		p.RssAnon = max(p.RssAnon, m.RssAnon)
		p.VmRSS = max(p.VmRSS, m.VmRSS)
		p.Samples++
	}
	s.lastHWM = max(s.lastHWM, m.VmHWM)
}

// Phase takes one more sample and returns the peaks since the previous Phase (or the start),
// starting a new phase.
func (s *rssSampler) Phase() rssPeak {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.phase
	s.phase = rssPeak{}
	return p
}

// Stop ends sampling and returns the peaks of the whole run, the highest VmHWM seen, and the
// first error met while reading. It may be called more than once.
func (s *rssSampler) Stop() (rssPeak, int64, error) {
	s.sample()
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.lastHWM, s.err
}
