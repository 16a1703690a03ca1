package store

import (
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
)

// Read-ahead of rebuilt pages. A page of a version that is not the materialized latest is
// rebuilt from a whole copy and deltas, which costs CPU, not I/O: a reader going through a file
// in order would use one core and leave the others idle. So when a file is read sequentially,
// the pages of the next readAheadBytes are built in the background on the other cores (two
// builders per core at most; a build is dropped rather than queued when all are busy), and
// the reader finds them in the page cache or waits for their build already under way.

const readAheadBytes = 8 * pageSize

// copyReadAheadBytes is how far ahead of a page rebuilt from the materialized copy the kernel is
// asked to read the copy: more than the pages built ahead, since reading the disk is the
// slower part after a restart and costs no CPU here.
const copyReadAheadBytes = 32 * pageSize

// readAhead holds the background builders of one Store.
type readAhead struct {
	tokens chan struct{}
	// checks are the checks ahead under way (checkAhead): one per two cores, at least one.
	checks   chan struct{}
	building sync.Map // pageKey -> true: a background build is under way; {id, -1}: a check
	// aheadBytes counts the content bytes of the checks started ahead (the benchmarks' share
	// of the bytes read whose hash ran off the reader's path).
	aheadBytes atomic.Int64
	wg         sync.WaitGroup
}

func newReadAhead() *readAhead {
	return &readAhead{tokens: make(chan struct{}, 2*max(1, runtime.NumCPU())),
		checks: make(chan struct{}, max(1, runtime.NumCPU()/2))}
}

// wait returns when no background build runs (Close).
func (r *readAhead) wait() { r.wg.Wait() }

// noteRead is called after a read of [off, end) of f: if it lies near the furthest read so
// far, the pages after it are built in the background. Near, not exactly at: the kernel sends
// a sequential reader's file as 128 KiB requests, several at once, served in any order.
func (f *versionFile) noteRead(off, end int64) {
	if f.opts.pages != nil || !f.s.objects.readsAhead() {
		return // a private cache (verify, export): no read-ahead
	}
	prev := f.lastEnd.Load()
	for end > prev && !f.lastEnd.CompareAndSwap(prev, end) {
		prev = f.lastEnd.Load()
	}
	if off < prev-sequentialSlack || off > prev+sequentialSlack {
		return
	}
	ahead := max(prev, end)
	if ahead < f.f.Size {
		f.prefetch(ahead, min(ahead+readAheadBytes, f.f.Size))
	}
}

// sequentialSlack is how far from the furthest read a read may start and still count as
// sequential.
const sequentialSlack = pageSize

// prefetch starts background builds of the pages under file bytes [from, to) that are neither
// cached nor held by the materialized copy.
func (f *versionFile) prefetch(from, to int64) {
	o := f.s.objects
	view := f.s.mat.view()
	type job struct {
		sg segment
		pg int64
	}
	var jobs []job
	var checks []int // segments whose checks to start ahead, in file order
	// Segments are in file order: start at the first that ends after from (a model may
	// have tens of thousands of tensors, and this runs on every read).
	i := sort.Search(len(f.segs), func(i int) bool { return f.segs[i].end > from })
	advised := false
	for k, sg := range f.segs[i:] {
		if sg.start >= to {
			break
		}
		if view.holds(sg.id) {
			// Read straight from the copy: the kernel is asked to read the copy ahead
			// of the reader, as for the pages rebuilt from it. Left to its own
			// read-ahead, the kernel read a cold copy for the requests in flight at once
			// at up to three times the CPU, now and then.
			if !advised {
				view.willNeed(sg.id, max(from, sg.start)-sg.start, copyReadAheadBytes)
				advised = true
			}
			continue
		}
		if f.s.memHolds(sg.id) {
			continue // read from the base in memory (read_basemem.go)
		}
		if f.opts.check && sg.start >= from && int64(i+k) >= f.checkNext.Load() {
			checks = append(checks, i+k) // a tensor the reader has not reached: it checks its own
		}
		first := (max(from, sg.start) - sg.start) / pageSize
		last := (min(to, sg.end) - 1 - sg.start) / pageSize
		for pg := first; pg <= last; pg++ {
			if !o.hasPage(sg.id, pg) {
				jobs = append(jobs, job{sg, pg})
			}
		}
	}
	view.release() // before any build: a build takes its own hold
	// The checks first: the reader waits for a tensor's check before its first byte, and
	// a check builds the tensor's pages itself (these jobs' among them).
	for _, k := range checks {
		if !o.checkAhead(f.segs[k].id, f.segs[k].hint, f.segs[k].end-f.segs[k].start) {
			break // every slot is busy: tried again at the next read
		}
		for next := f.checkNext.Load(); next <= int64(k) && !f.checkNext.CompareAndSwap(next, int64(k)+1); next = f.checkNext.Load() {
		}
	}
	for _, j := range jobs {
		if !o.buildAhead(j.sg.id, j.sg.hint, j.pg) {
			return // every builder is busy: the reader will build what it needs
		}
	}
}

// checkAheadShare bounds the objects whose checks the read-ahead starts (checkAhead) to this
// share of the page cache: the check of a larger one would push the pages of the tensor being
// read out of the cache before the reader is done with them, and have them built again.
const checkAheadShare = 4

// checkAhead starts a background check (read_check.go) of object id, size content bytes, the
// next tensor a sequential reader will reach, so that the check, which the reader would wait
// for at its first byte, runs on another core while the reader is served the tensors before
// it. It reports whether the reader may count the check as started: true also when one is
// under way, when the object is too large to be checked ahead (the reader checks it), and
// false, starting nothing, when every slot for checks ahead is busy. The check's verdict is
// the reader's to see when it gets there: a failure to hash is remembered (checkTensor), any
// other error is the reader's own check's to meet again.
func (o *objectStore) checkAhead(id ID, hint objHint, size int64) bool {
	if size > o.pages.limit/checkAheadShare {
		return true
	}
	key := pageKey{id, -1}
	if _, busy := o.ra.building.LoadOrStore(key, true); busy {
		return true
	}
	select {
	case o.ra.checks <- struct{}{}:
	default:
		o.ra.building.Delete(key)
		return false
	}
	o.ra.wg.Add(1)
	o.ra.aheadBytes.Add(size)
	go func() {
		defer func() { o.ra.building.Delete(key); <-o.ra.checks; o.ra.wg.Done() }()
		o.st.checker.checkTensor(id, hint)
	}()
	return true
}

// willNeed starts the kernel reading the copy's bytes of object id from content offset off
// for n bytes: a page rebuilt from the copy is followed by the next, and the copy is cold after
// a restart, so the disk works while the deltas are applied. Only the part beyond what was
// already asked for is passed on: the kernel walks every page of the range it is given.
func (v *matView) willNeed(id ID, off, n int64) {
	loc, ok := v.m.locs[id]
	if !ok {
		return
	}
	v.willNeedFile(loc.path, loc.off+off, n)
}

// willNeedFile is willNeed for bytes [off, off+n) of file path of the copy.
func (v *matView) willNeedFile(path string, off, n int64) {
	from, to := off, off+n
	key := adviceKey{path, v.gen}
	v.m.adviceMu.Lock()
	done := v.m.advised[key]
	switch {
	case to <= done:
		v.m.adviceMu.Unlock()
		return // asked for already
	case from >= done-2*n:
		// Continuing the furthest advice of this file: pass on only the new part.
		from = max(from, done)
		if v.m.advised == nil || len(v.m.advised) > 1024 {
			v.m.advised = map[adviceKey]int64{}
		}
		v.m.advised[key] = to
	default:
		// Far behind it (a second reader of the file): its range whole, not recorded.
	}
	v.m.adviceMu.Unlock()
	if f, err := v.m.file(path); err == nil {
		adviseWillNeed(f, from, to-from)
	}
}

// adviceKey names a file of one generation of the copy, for willNeed.
type adviceKey struct {
	path string
	gen  uint64
}
