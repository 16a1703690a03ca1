package store

import (
	"fmt"
	"sync"
)

// The finisher of a stream's pipeline stores each tensor once the worker has seen all its
// bytes (finishTensor): it waits for the tensor's SHA-256 from the hasher, codes the last
// block of the delta and writes the object, with its fsync. The worker goes on with the next
// tensor meanwhile. Done by the worker itself, these waits were a quarter of its time, and the
// worker is the stage that bounds ingest.
//
// Tensors are stored in file order, so the stored ones are always a prefix of the file (what
// Replay reads back from objects); the ones handed over and not stored, the first of which
// may have failed, are replayed like a tensor in progress.

// finisherQueue bounds the tensors handed over and not yet stored: each holds its delta so
// far and, when it is a whole copy, an open object file.
const finisherQueue = 2

type finisher struct {
	st   *FileStream
	ch   chan []*tensorState
	done chan struct{}
	// handing: tensors handed over and not yet sent to the finisher (the worker's: it sends
	// those of a batch of jobs at once, flush).
	handing []*tensorState

	mu       sync.Mutex
	settled  *sync.Cond     // signalled when a tensor is stored or given up
	stored   int            // tensors stored: 0..stored-1 have their results in entry.Tensors
	unstored []*tensorState // handed over and not stored, in file order
	inQueue  int            // of unstored, those the finisher has not yet settled

	src baseSource // the finisher's reads of bases (a tensor rebuilt whole)
}

func (f *finisher) init(st *FileStream) {
	f.st = st
	f.ch = make(chan []*tensorState, finisherQueue)
	f.done = make(chan struct{})
	f.settled = sync.NewCond(&f.mu)
}

// hand gives the finisher a tensor whose bytes the worker has all processed (worker only); it
// is sent with the others of the worker's batch (flush).
func (f *finisher) hand(ts *tensorState) {
	f.mu.Lock()
	f.unstored = append(f.unstored, ts)
	f.inQueue++
	f.mu.Unlock()
	f.handing = append(f.handing, ts)
}

// flush sends the finisher the tensors handed over since the last flush (worker only).
func (f *finisher) flush() {
	if len(f.handing) > 0 {
		f.ch <- f.handing
		f.handing = nil
	}
}

// close tells the finisher no more tensors come (worker only, as it exits).
func (f *finisher) close() {
	f.flush()
	close(f.ch)
}

// drain waits until every tensor handed over is stored or given up (worker only).
func (f *finisher) drain() {
	f.flush()
	f.mu.Lock()
	for f.inQueue > 0 {
		f.settled.Wait()
	}
	f.mu.Unlock()
}

// progress returns how many tensors are stored, and those handed over and not stored. Call it
// when nothing is in the finisher's queue (after drain, or once it has exited).
func (f *finisher) progress() (int, []*tensorState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stored, f.unstored
}

func (f *finisher) run() {
	defer close(f.done)
	defer f.src.close()
	for batch := range f.ch {
		for _, ts := range batch {
			f.finish(ts)
		}
	}
}

// finish stores one tensor handed over, unless the stream failed.
func (f *finisher) finish(ts *tensorState) {
	st := f.st
	// After a failure nothing more is stored: the stored tensors stay a prefix.
	ran := st.failed() == nil
	var err error
	if ran {
		err = st.finishTensor(ts, &f.src)
	}
	f.mu.Lock()
	if ran && err == nil {
		f.unstored = f.unstored[1:]
		f.stored = ts.idx + 1
	}
	f.inQueue--
	f.settled.Broadcast()
	f.mu.Unlock()
	if err != nil {
		st.setFailed(fmt.Errorf("tensor %s: %w", ts.t.Name, err))
	}
}
