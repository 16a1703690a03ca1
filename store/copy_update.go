package store

import (
	"bytes"
	"os"
)

// Updates of the materialized copy (copy_materialized.go has the copy itself, its rebuild and its
// checks): bringing it forward after a seal off the seal's critical path, and the in-place
// write of only the pages of a file that changed.

// ensureInBackground runs ensure on its own goroutine: a seal returns without waiting for
// the copy. Reads meanwhile replay (the copy holds nothing while it changes) and the next
// ensure waits for this one. close waits for it.
func (m *materialized) ensureInBackground() {
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		if err := m.ensure(); err != nil {
			m.s.log.Warn("materialized copy not brought forward (it is rebuilt when next needed)", "err", err)
		}
	}()
}

// writeChangedRuns writes the pages of now that differ from was at file offset base; runs of
// changed pages are merged into one write. A page is the unit of I/O, so writing a page of
// which one byte changed costs the same as writing that byte; comparing pages with
// bytes.Equal (vectorised) rather than bytes keeps the scan far faster than the disk.
func writeChangedRuns(f *os.File, was, now []byte, base int64) error {
	const page = 4096
	start := -1 // first byte of the run of changed pages being collected
	for off := 0; off < len(now); off += page {
		end := min(off+page, len(now))
		if !bytes.Equal(was[off:end], now[off:end]) {
			if start < 0 {
				start = off
			}
			continue
		}
		if start >= 0 {
			if _, err := f.WriteAt(now[start:off], base+int64(start)); err != nil {
				return err
			}
			start = -1
		}
	}
	if start >= 0 {
		if _, err := f.WriteAt(now[start:], base+int64(start)); err != nil {
			return err
		}
	}
	return nil
}
