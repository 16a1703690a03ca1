package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sys/unix"
)

// isTerminal reports whether f is a terminal (progress bars go only to terminals).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// progress draws a progress bar of a long command on stderr when stderr is a terminal, with
// github.com/schollz/progressbar: the label, the percentage, bytes done of the total, the
// rate, the elapsed time and the estimated time left, redrawn at most every 200 ms and cleared
// when the command ends. When stderr is not a terminal (a pipe, a log file) it prints nothing:
// scripts see only the command's normal output.
type progress struct {
	mu    sync.Mutex
	w     io.Writer // nil: not a terminal
	label string
	bar   *progressbar.ProgressBar
	max   int64
}

func newProgress(e *env, label string) *progress {
	p := &progress{label: label}
	if e.isTerminal {
		p.w = e.stderr
	}
	return p
}

// update reports done of total bytes; the store's progress hooks have this signature. A
// total of 0 (nothing to do) draws nothing.
func (p *progress) update(done, total int64) {
	if p == nil || p.w == nil || total <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.label),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowTotalBytes(true),
			progressbar.OptionUseIECUnits(true),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		p.max = total
	} else if total != p.max {
		p.bar.ChangeMax64(total)
		p.max = total
	}
	// The bar is never driven to its end: a finished bar stays finished, and a store's total
	// may still grow (verify's does when it goes from the objects to the versions). done
	// clears it. The bar's errors are about drawing (a closed terminal): the command goes on.
	_ = p.bar.Set64(min(done, total-1))
}

// done clears the bar, whether the command finished or failed.
func (p *progress) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Clear()
		_ = p.bar.Exit()
	}
}

// countingWriterAt counts the bytes written through it for a progress bar.
type countingWriterAt struct {
	w     io.WriterAt
	mu    sync.Mutex
	n     int64
	total int64
	p     *progress
}

func (c *countingWriterAt) WriteAt(b []byte, off int64) (int, error) {
	n, err := c.w.WriteAt(b, off)
	c.mu.Lock()
	c.n += int64(n)
	done := c.n
	c.mu.Unlock()
	c.p.update(done, c.total)
	return n, err
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
