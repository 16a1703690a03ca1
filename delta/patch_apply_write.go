package delta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// The write phase of an apply: every changed element is stored at its place in the target
// and nothing else is written.
//
// With a mapping of the file (MAP_SHARED) there are two ways. Dense changes (on average at
// least one per two pages: every RL step) take the page write (patch_apply_pages.go): the
// changed pages patched in memory and written back with pwrite. Sparse ones are stored into
// the mapping: at 1% density one pwrite per run of adjacent elements would be ~5M syscalls
// for a 1 GiB file, whereas stores cost nanoseconds. What the stores do cost is one write
// fault per page that holds a change (the kernel marks it dirty; only those pages are
// dirtied), and on ext4 that fault runs the file system's page_mkwrite (~1.4 µs a page),
// which is why dense changes go by pages; faulting the pages in ahead with
// madvise(MADV_POPULATE_WRITE) costs the same. The stores are split over GOMAXPROCS
// goroutines.
//
// writeRuns, one WriteAt per run of adjacent elements, is the reference (tests compare the
// two) and the fallback when the target cannot be mapped.

// fileMapping is a shared, writable mapping of a whole target file (patch_apply_mmap_*.go).
type fileMapping struct {
	data []byte
}

// errNoMapping marks a target that cannot be mapped (no file descriptor, a platform or file
// system without shared writable mappings): the apply falls back to WriteAt.
var errNoMapping = errors.New("target cannot be memory-mapped")

// writeChanges writes every changed element to the target: with a mapping m, as whole pages
// patched in memory when most pages change (patch_apply_pages.go), else as stores into m;
// without one, with WriteAt.
func writeChanges(p *Patch, l targetLayout, target io.WriterAt, m *fileMapping, res *ApplyResult, cfg applyConfig) error {
	if m != nil && !cfg.stores && (cfg.pages || usePageWrite(l, int64(len(m.data)))) {
		res.Method = MethodPages
		return writePages(p, l, target, m.data, res, cfg)
	}
	if m != nil {
		res.Method = MethodMmap
		return writeMapped(p, l, m, res, cfg)
	}
	res.Method = MethodPwrite
	return writeRuns(p, l, target, res, cfg)
}

// maxRun bounds one coalesced write.
const maxRun = 1 << 20

// writeRuns writes every changed element to the target, one WriteAt per run of adjacent
// elements.
func writeRuns(p *Patch, l targetLayout, target io.WriterAt, res *ApplyResult, cfg applyConfig) error {
	var run []byte
	var runAt int64
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		if _, err := target.WriteAt(run, runAt); err != nil {
			return err
		}
		res.Writes++
		run = run[:0]
		return cfg.fail(stepWroteRun)
	}
	for _, t := range l.tensors {
		c := p.newCursor(t.plan)
		for {
			idx, val, ok, err := c.next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			at := l.dataStart + t.target.Begin + idx*int64(c.width)
			if len(run) > 0 && (at != runAt+int64(len(run)) || len(run) >= maxRun) {
				if err := flush(); err != nil {
					return err
				}
			}
			if len(run) == 0 {
				runAt = at
			}
			run = append(run, val...)
			res.ElementsWritten++
		}
	}
	return flush()
}

// changeRange is pairs [from, to) of one tensor's changes: a share of the write phase.
type changeRange struct {
	tensor   appliedTensor
	from, to int64
}

// minPairsPerWorker keeps small patches on one goroutine (goroutines cost more than they save).
const minPairsPerWorker = 1 << 16

// splitChanges cuts the changes of the tensors, in order, into at most workers shares of
// about equal numbers of changed elements, each at least minPairs.
func splitChanges(tensors []appliedTensor, workers int, minPairs int64) [][]changeRange {
	var total int64
	for _, t := range tensors {
		total += t.plan.Changed
	}
	workers = int(max(1, min(int64(workers), total/max(minPairs, 1))))
	per := (total + int64(workers) - 1) / int64(workers)
	var shares [][]changeRange
	var cur []changeRange
	var filled int64
	for _, t := range tensors {
		for from := int64(0); from < t.plan.Changed; {
			n := min(t.plan.Changed-from, per-filled)
			cur = append(cur, changeRange{tensor: t, from: from, to: from + n})
			from += n
			if filled += n; filled == per {
				shares, cur, filled = append(shares, cur), nil, 0
			}
		}
	}
	if len(cur) > 0 {
		shares = append(shares, cur)
	}
	return shares
}

// writeMapped stores every changed element into the mapping, the shares on parallel
// goroutines. A failpoint error (a simulated crash) stops every goroutine.
func writeMapped(p *Patch, l targetLayout, m *fileMapping, res *ApplyResult, cfg applyConfig) error {
	workers, minPairs := cfg.workers, int64(1) // tests force small shares
	if workers <= 0 {
		workers, minPairs = runtime.GOMAXPROCS(0), minPairsPerWorker
	}
	shares := splitChanges(l.tensors, workers, minPairs)
	gate := &runGate{cfg: cfg}
	errs := make([]error, len(shares))
	written := make([]int64, len(shares))
	var wg sync.WaitGroup
	for i, share := range shares {
		wg.Go(func() {
			written[i], errs[i] = storeChanges(p, l, m, share, gate.afterRun)
			if errs[i] != nil {
				gate.stop()
			}
		})
	}
	wg.Wait()
	for i := range shares {
		res.ElementsWritten += written[i]
	}
	// The first real error; errStopped only says another goroutine failed.
	for _, err := range errs {
		if err != nil && !errors.Is(err, errStopped) {
			return err
		}
	}
	return nil
}

// errStopped ends a write goroutine because another one failed.
var errStopped = errors.New("stopped: another writer failed")

// runGate is shared by the write goroutines of one apply: after each run it takes the
// failpoint stepWroteRun (a simulated crash), one goroutine at a time, and once any goroutine
// failed every other one stops with errStopped.
type runGate struct {
	cfg     applyConfig
	mu      sync.Mutex
	stopped atomic.Bool
}

// afterRun is called by a goroutine after each run it wrote.
func (g *runGate) afterRun() error {
	if g.stopped.Load() {
		return errStopped
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.cfg.fail(stepWroteRun); err != nil {
		g.stopped.Store(true)
		return err
	}
	return nil
}

// stop makes the other goroutines stop at their next run.
func (g *runGate) stop() { g.stopped.Store(true) }

// storeChanges stores one share of the changes into the mapping, a cursor batch at a time.
// A fault on the mapping (the file was truncated under us: SIGBUS) becomes an error.
func storeChanges(p *Patch, l targetLayout, m *fileMapping, share []changeRange, afterBatch func() error) (written int64, err error) {
	defer faultToError(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var prev *patchCursor
	for _, cr := range share {
		c := p.newCursorRange(cr.tensor.plan, cr.from, cr.to)
		if prev != nil {
			c.reuse(prev) // no garbage per tensor: see scanMapped
		}
		prev = c
		begin := l.dataStart + cr.tensor.target.Begin
		width := int64(c.width)
		for c.left > 0 {
			if err := c.fill(); err != nil {
				return written, err
			}
			if err := storeBatch(c, m.data, begin, width); err != nil {
				return written, err
			}
			written += int64(c.n)
			if err := afterBatch(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// storeBatch stores the elements of the cursor's batch into data, the tensor's bytes
// starting at offset begin. bf16 with I32 indices, nearly every patch, has a loop of its own
// without a call per element; the general loop is its reference.
func storeBatch(c *patchCursor, data []byte, begin, width int64) error {
	if width != 2 || c.idxSize != 4 {
		return storeBatchGeneral(c, data, begin, width)
	}
	elements := c.t.Elements
	for ; c.pos < c.n; c.pos++ {
		idx := int64(int32(binary.LittleEndian.Uint32(c.idx[4*c.pos:])))
		if idx <= c.last || idx >= elements {
			_, err := c.index() // the same check, with its message
			return err
		}
		at := begin + 2*idx
		dst, val := data[at:at+2], c.val[2*c.pos:2*c.pos+2]
		dst[0], dst[1] = val[0], val[1]
		c.last = idx
	}
	return nil
}

func storeBatchGeneral(c *patchCursor, data []byte, begin, width int64) error {
	for ; c.pos < c.n; c.pos++ {
		idx, err := c.index()
		if err != nil {
			return err
		}
		at := begin + idx*width
		copy(data[at:at+width], c.val[int64(c.pos)*width:])
		c.last = idx
	}
	return nil
}

// applyPatchReference is the simple reference of ApplyPatchWith for tests: the whole file in
// memory, every change copied in, no journal.
func applyPatchReference(p *Patch, file []byte, name string) ([]byte, error) {
	h, err := ParseHeader(file, int64(len(file)))
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(file)
	for _, t := range p.TensorsOf(name) {
		th, ok := h.Tensor(t.Name)
		if !ok || th.DType != t.DType || th.Elements() != t.Elements {
			return nil, fmt.Errorf("%w: no tensor %q", ErrBaseMismatch, t.Name)
		}
		c := p.newCursor(t)
		for {
			idx, val, ok, err := c.next()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			copy(out[h.DataStart()+th.Begin+idx*int64(len(val)):], val)
		}
	}
	if f, ok := p.File(name); ok && f.NewHeader != nil {
		copy(out, f.NewHeader)
	}
	return out, nil
}
