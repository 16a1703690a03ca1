package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// isTerminal reports whether f is a terminal (progress lines go only to terminals).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress prints a self-overwriting progress line on a terminal, at most every 200 ms.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	on    bool
	label string
	start time.Time
	last  time.Time
	shown bool
}

func newProgress(e *env, label string) *progress {
	return &progress{w: e.stderr, on: e.isTerminal, label: label, start: time.Now()}
}

// update reports done of total bytes.
func (p *progress) update(done, total int64) {
	if p == nil || !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if now.Sub(p.last) < 200*time.Millisecond && done < total {
		return
	}
	p.last = now
	rate := float64(done) / now.Sub(p.start).Seconds()
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	fmt.Fprintf(p.w, "\r%s %5.1f%%  %s / %s  %s/s   ", p.label, pct, humanBytes(done), humanBytes(total), humanBytes(int64(rate)))
	p.shown = true
}

// done clears the progress line.
func (p *progress) done() {
	if p == nil || !p.on || !p.shown {
		return
	}
	fmt.Fprint(p.w, "\r\033[K")
}

// humanBytes prints n with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
