package store

import (
	"github.com/weightfs/weightfs/internal/logtest"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestStreamTiming is a measuring tool, not a test: with WEIGHTFS_STREAM_TIMING=DIR, where
// DIR/1, DIR/2, ... hold checkpoints, it commits version 1 through the batch path and streams
// the later ones in 1 MiB writes (no FUSE), logging the time of the writes and of the seal.
func TestStreamTiming(t *testing.T) {
	src := os.Getenv("WEIGHTFS_STREAM_TIMING")
	if src == "" {
		t.Skip("set WEIGHTFS_STREAM_TIMING=DIR to measure the stream without FUSE")
	}
	s, _ := newStore(t, Options{Logger: logtest.New(t.Logf)})
	buf := make([]byte, 1<<20)
	for v := uint64(1); ; v++ {
		dir := filepath.Join(src, strconv.FormatUint(v, 10))
		entries, err := os.ReadDir(dir)
		if err != nil {
			break
		}
		w, err := s.NewVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		w.MaterializeInBackground()
		start := time.Now()
		cpu0 := cpuTime()
		var total int64
		for _, e := range entries {
			in, err := os.Open(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			st, err := w.StreamFile(e.Name())
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.CopyBuffer(struct{ io.Writer }{st}, struct{ io.Reader }{in}, buf)
			if err != nil {
				t.Fatal(err)
			}
			total += n
			in.Close()
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if err := w.AddStream(e.Name(), st, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		wrote := time.Since(start)
		cpu := cpuTime() - cpu0
		if _, err := w.Seal(); err != nil {
			t.Fatal(err)
		}
		t.Logf("v%d: %d bytes streamed at %.0f MB/s (%.1f CPU-seconds per GB), sealed in %v", v, total,
			float64(total)/1e6/wrote.Seconds(), cpu.Seconds()/(float64(total)/1e9), time.Since(start)-wrote)
		s.mat.ensure() // outside the measurement
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
