package delta

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
)

// The page write of an apply: when the changes touch most pages of the file (an RL step at
// lr 1e-6 changes ~1% of the elements, ~20 per 4 KiB page of bf16), each chunk of the file
// is copied out of the mapping, patched in memory (the read pass's chunkPatcher again), and
// the pages that differ from the file are written back with one pwrite per run of them.
// Storing the elements into the shared mapping instead costs a write fault per page, and on
// ext4 each runs the file system's page_mkwrite (~1.4 µs: 0.39 CPU-s for a 1 GiB file,
// measured with perf on the development machine), where the copy, the compare and the
// pwrite of the same pages cost about half (docs/benchmarks-history.md, "Issue 20:
// figures 9 and 6 (session 10)"). Only pages holding a change are written, as with the stores; the other bytes of
// those pages are the file's own, read a moment before under the apply's lock, so an
// interrupted write leaves every byte either the base's or the result's (the file marked, as
// with the stores), and running the apply again converges as before.

// pageSize is the unit compared and written: the page cache's on every common platform. A
// larger kernel page only means that a few more bytes are rewritten with their own value.
const pageSize = 4096

// pageWriteMin is the share of pages with a change above which the page write beats the
// stores: at least one changed element per two pages on average.
const pageWriteMin = 2

// usePageWrite reports whether the changes are dense enough for the page write.
func usePageWrite(l targetLayout, size int64) bool {
	var changed int64
	for _, t := range l.tensors {
		changed += t.plan.Changed
	}
	pages := (size - l.dataStart + pageSize - 1) / pageSize
	return changed*pageWriteMin >= pages
}

// writePages writes every change to the target: each chunk of the data section is copied out
// of data (the target's mapping), patched, and the runs of pages that now differ are written
// with WriteAt. The file is cut at page boundaries into one range per goroutine (GOMAXPROCS,
// or cfg.workers), so that no page is written by two of them. A failpoint error (a simulated
// crash) stops every goroutine.
func writePages(p *Patch, l targetLayout, target io.WriterAt, data []byte, res *ApplyResult, cfg applyConfig) error {
	size := int64(len(data))
	workers, minBytes := cfg.workers, int64(pageSize) // tests force small ranges
	if workers <= 0 {
		workers, minBytes = runtime.GOMAXPROCS(0), minPagesPerWorker
	}
	pages := (size - l.dataStart + pageSize - 1) / pageSize
	workers = int(max(1, min(int64(workers), pages*pageSize/minBytes)))
	bounds := make([]int64, workers+1)
	bounds[0], bounds[workers] = l.dataStart, size
	for i := 1; i < workers; i++ {
		// A page boundary of the file, past the previous bound.
		b := (l.dataStart + (size-l.dataStart)*int64(i)/int64(workers)) / pageSize * pageSize
		bounds[i] = max(b, bounds[i-1])
	}
	gate := &runGate{cfg: cfg}
	errs := make([]error, workers)
	writes := make([]int, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			writes[i], errs[i] = writePageRange(p, l, target, data, bounds[i], bounds[i+1], cfg.chunk, gate.afterRun)
			if errs[i] != nil {
				gate.stop()
			}
		})
	}
	wg.Wait()
	for i := range workers {
		res.Writes += writes[i]
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, errStopped) {
			return err
		}
	}
	for _, t := range l.tensors {
		res.ElementsWritten += t.plan.Changed
	}
	return nil
}

// minPagesPerWorker keeps small files on one goroutine.
const minPagesPerWorker = 8 << 20

// writePageRange is one goroutine's share of writePages: file bytes [from, to), with chunks
// of at most step bytes (mappedChunk when step is 0) starting at multiples of their size.
func writePageRange(p *Patch, l targetLayout, target io.WriterAt, data []byte, from, to, step int64, afterWrite func() error) (writes int, err error) {
	defer faultToError(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if step <= 0 || step > mappedChunk {
		step = mappedChunk // tests cut pages and elements across smaller chunks
	}
	patcher := newChunkPatcher(p, l.tensors)
	if err := patcher.seek(from - l.dataStart); err != nil {
		return 0, err
	}
	buf := make([]byte, step)
	for from < to {
		end := min(to, (from/step+1)*step)
		chunk := buf[:end-from]
		copy(chunk, data[from:end])
		if err := patcher.patch(chunk, from-l.dataStart); err != nil {
			return writes, err
		}
		n, err := writeChangedPages(target, chunk, data[from:end], from, afterWrite)
		writes += n
		if err != nil {
			return writes, err
		}
		from = end
	}
	return writes, nil
}

// writeChangedPages writes the runs of pages of patched (file bytes [at, at+len(patched)),
// at most one page unaligned at the start) that differ from old.
func writeChangedPages(target io.WriterAt, patched, old []byte, at int64, afterWrite func() error) (writes int, err error) {
	runStart := -1
	flush := func(end int) error {
		if runStart < 0 {
			return nil
		}
		if _, err := target.WriteAt(patched[runStart:end], at+int64(runStart)); err != nil {
			return fmt.Errorf("write at %d: %w", at+int64(runStart), err)
		}
		writes++
		runStart = -1
		return afterWrite()
	}
	for i := 0; i < len(patched); {
		end := min(len(patched), int((at+int64(i))/pageSize+1)*pageSize-int(at))
		if bytes.Equal(patched[i:end], old[i:end]) {
			if err := flush(i); err != nil {
				return writes, err
			}
		} else if runStart < 0 {
			runStart = i
		}
		i = end
	}
	return writes, flush(len(patched))
}
