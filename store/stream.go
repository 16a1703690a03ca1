package store

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// The streaming ingest path (docs/design.md, "Ingest paths"). A FileStream takes one file of
// an open version as its bytes arrive in order and does the batch path's work as they come:
// it buffers the safetensors header, then diffs each tensor's bytes against the same tensor
// of the latest version (read from the materialized copy), feeds the delta encoder and the
// hashes, and writes only new objects. Nothing of the file is staged on disk. It stores
// exactly the objects, and builds exactly the manifest entry, that Writer.AddFile would for
// the same bytes; where it cannot know that while streaming (the file's final size decides
// whether it is safetensors; a rename may change which tensor is a tensor's base), it checks
// at the end and redoes the file through the batch path from the objects it stored.
//
// Work is pipelined over four to six goroutines per stream: the caller of Write copies
// bytes into 4 MiB chunks (with the base in memory and no seed, pieces of the tensor's buffer
// in the memory: stream_keep.go), a worker diffs and encodes, a finisher stores each tensor the
// worker is done with (stream_finish.go), a hasher computes each tensor's SHA-256 (its
// object's name) and the whole file's, both in one pass with the SHA extensions, else with a
// second hasher for the file's (stream_pipe.go), and the bytes are written to the seed, the
// file that becomes the materialized copy's once the version is sealed (copy_seed.go): by the
// hasher itself with asynchronous I/O where the kernel has it, else by a goroutine of its own. Chunks
// come from a pool per Writer, so the memory of all streams of a version is bounded, and a
// Write waits when the pipeline is full.
//
// A stream can always hand back every byte it accepted (Replay): the caller switches to the
// batch path when the file stops being written in order (docs/design.md).
//
// Failpoints (tests, Store.hook): "stream-base-read" before the worker reads a chunk's base
// bytes (the chunk stays unprocessed), "stream-object-put" before it writes a delta object.

// ErrStreamStopped is returned by a FileStream that was stopped by Replay or Abort, or that
// failed: the caller must take the bytes back with Replay and use the batch path.
var ErrStreamStopped = errors.New("file stream stopped")

// streamChunkSize is the size of the chunks the pipeline moves: the batch path's chunk.
const streamChunkSize = ingestChunk

// streamQueue is how many chunks may wait for the worker and for each hasher, per stream.
const streamQueue = 3

// streamPoolChunks bounds the chunks all streams of one Writer hold at once (64 MiB).
const streamPoolChunks = 16

type streamState int

const (
	streamOpen    streamState = iota
	streamClosed              // Close succeeded: the result is ready for AddStream
	streamStopped             // Replay or a failed Close stopped the pipeline
	streamAborted             // Abort dropped everything
)

// FileStream ingests one file of an open version from its bytes in order. Create it with
// Writer.StreamFile, feed it with Write, end it with Close and add its result with
// Writer.AddStream; or take its bytes back with Replay and drop it with Abort. Calls are
// serialized; any goroutine may make them.
type FileStream struct {
	w    *Writer
	s    *Store
	hint string // the file's path when the stream started: where bases are looked up

	mu    sync.Mutex
	state streamState
	// closedOnce: Close succeeded once (wk.entry's size and SHA-256 are the file's), even if
	// the stream was aborted since (its Writer ended).
	closedOnce bool
	size       int64 // bytes accepted

	class  streamClass
	prefix []byte // the file's first bytes until its class is known; then the header
	hdr    *delta.Header
	// implied is the size a safetensors file must have (its header's data end).
	implied int64
	basis   *version // the latest sealed version when the stream started; nil: none
	reason  string   // why a file is stored as a blob, for the log

	// Routing of incoming bytes (caller of Write).
	pos       int64  // the file offset of the next byte routed
	cur       int    // the tensor receiving bytes
	curOff    int64  // bytes of it received
	fill      *chunk // the chunk being filled; nil: none
	fillLen   int
	fillAt    int   // fill's bytes before fillAt went to the pipeline (stream_batch.go)
	fillStart int64 // offset in the tensor of fill's byte at fillAt
	// keepRoute: tensors' bytes are routed into their buffers in the base in memory, which
	// are then the chunks (stream_keep.go); keep is the current tensor's (nil: none).
	keepRoute bool
	keep      []byte
	// batch: jobs go to the pipeline in batches of about a chunk's bytes, and a tensor's bytes
	// share a pool chunk with the tensors before it (stream_batch.go); pend is the batch being
	// gathered. Off with ingester.streamReference.
	batch bool
	pend  pendingJobs

	jobs       chan []streamJob
	hashes     chan []hashJob
	workerDone chan struct{}
	hasherDone chan struct{}
	// fileHashes feed the file hasher: every byte, for the whole file's SHA-256, on a core of
	// its own beside the tensors' SHA-256 (the two are most of ingest's work).
	fileHashes     chan []hashJob
	fileHasherDone chan struct{}

	wk  workerState // owned by the worker goroutine until it has exited
	fin finisher    // stores the tensors the worker is done with (stream_finish.go)
	hs  hasherState // owned by the hasher goroutines until they have exited

	failMu sync.Mutex
	fail   error // the worker's first error
	redo   bool  // Close found the batch path would classify the file otherwise

	reader *versionFile // reads of a closed stream's file (ReadAt)
}

// StreamFile starts a stream for one file; hint is the file's path now (its final path is
// given to AddStream). The materialized copy is brought to the latest version first, since
// the stream diffs against it.
func (w *Writer) StreamFile(hint string) (*FileStream, error) {
	if err := checkPath(hint); err != nil {
		return nil, err
	}
	if err := w.checkLive(); err != nil {
		return nil, err
	}
	if err := w.s.mat.ensureForWriter(); err != nil { // not while deferred (copy_defer.go)
		return nil, fmt.Errorf("stream %s: %w", hint, err)
	}
	w.noteFileStart()
	basis, err := w.s.versions.latestVersion()
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", hint, err)
	}
	st := &FileStream{
		w: w, s: w.s, hint: hint, basis: basis,
		jobs:           make(chan []streamJob, streamQueue),
		hashes:         make(chan []hashJob, streamQueue),
		workerDone:     make(chan struct{}),
		hasherDone:     make(chan struct{}),
		fileHashes:     make(chan []hashJob, streamQueue),
		batch:          !w.in.streamReference,
		fileHasherDone: make(chan struct{}),
	}
	st.hs.init(w.in.hashInOnePass)
	st.fin.init(st)
	// The hasher also sums the bytes for the copy's checks, and the bytes seed the copy of
	// this version, which takes them instead of being brought forward (copy_seed.go).
	seed, err := w.seedFile(basis) // none when the copy will be deferred (ingest_basemem.go)
	if err != nil {
		seed = nil // no seed: the copy is brought forward in place
	}
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		if seed != nil {
			seed.Close()
			os.Remove(seed.Name())
		}
		return nil, fmt.Errorf("version %d: %w", w.v, ErrWriterDone)
	}
	if w.pool == nil {
		w.pool = newChunkPool(streamPoolChunks)
	}
	st.hs.seed = &seedWriter{pool: w.pool}
	if seed != nil {
		st.hs.seed.startSeed(seed, w.pool)
	}
	st.keepRoute = seed == nil && !w.in.streamReference // a seed writes whole pages of pool chunks
	w.streams[st] = struct{}{}
	w.mu.Unlock()
	go st.runWorker()
	go st.fin.run()
	go st.runHasher()
	if st.hs.oneHasher {
		close(st.fileHasherDone) // runHasher hashes the file too
	} else {
		go st.runFileHasher()
	}
	return st, nil
}

// Size is the number of bytes written so far.
func (st *FileStream) Size() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.size
}

func (st *FileStream) failed() error {
	st.failMu.Lock()
	defer st.failMu.Unlock()
	return st.fail
}

func (st *FileStream) setFailed(err error) {
	st.failMu.Lock()
	if st.fail == nil {
		st.fail = err
	}
	st.failMu.Unlock()
}

// Write adds the file's next bytes. It takes all of p or none: an error (the stream failed
// or was stopped) means p was not taken, and the caller should Replay and go on without the
// stream. The bytes of p are copied; p may be reused when Write returns.
func (st *FileStream) Write(p []byte) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.state != streamOpen {
		return 0, fmt.Errorf("write %s: %w", st.hint, ErrStreamStopped)
	}
	if err := st.failed(); err != nil {
		return 0, fmt.Errorf("write %s: %w: %w", st.hint, ErrStreamStopped, err)
	}
	n := len(p)
	for len(p) > 0 {
		switch st.class {
		case classUndecided:
			p = st.takePrefix(p)
		case classSafetensors:
			p = st.routeTensors(p)
		default:
			p = st.routeBlob(p)
		}
	}
	st.size += int64(n)
	return n, nil
}

// takePrefix collects the file's first bytes until its class can be decided.
func (st *FileStream) takePrefix(p []byte) []byte {
	need := headerNeed(st.prefix)
	if need >= 0 {
		take := min(int64(len(p)), need-int64(len(st.prefix)))
		st.prefix = append(st.prefix, p[:take]...)
		p = p[take:]
		st.pos += take
		if int64(len(st.prefix)) < need || headerNeed(st.prefix) > need {
			return p // more to come (the 8-byte length arrived: now the JSON)
		}
	}
	class, hdr, implied := classifyHeader(st.prefix)
	switch class {
	case classSafetensors:
		st.startTensors(hdr, implied)
	default:
		if class == classBlob {
			st.reason = "its header length is out of range"
		} else {
			st.reason = "its header does not parse"
		}
		st.startBlob(class, st.prefix)
	}
	return p
}

// startTensors begins a safetensors file: the header object, then tensor after tensor.
func (st *FileStream) startTensors(hdr *delta.Header, implied int64) {
	st.class, st.hdr, st.implied = classSafetensors, hdr, implied
	header := st.prefix[:hdr.DataStart()]
	e := &st.wk.entry
	e.Kind, e.HeaderLen = kindSafetensors, hdr.DataStart()
	e.Tensors = make([]manifestTensor, len(hdr.Tensors))
	for i, t := range hdr.Tensors {
		e.Tensors[i] = manifestTensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: t.Begin, End: t.End}
	}
	st.hashFileBytes(nil, header)
	st.queueJob(streamJob{kind: jobHeader, data: header})
	st.skipEmptyTensors()
}

// startBlob begins a file that is not (or may not be) safetensors: its bytes so far, then
// everything else, go into one whole object.
func (st *FileStream) startBlob(class streamClass, soFar []byte) {
	st.class = class
	st.hashFileBytes(nil, soFar)
	st.queueJob(streamJob{kind: jobBlobStart, data: soFar})
}

// routeTensors copies bytes into the chunks of the tensor they belong to.
func (st *FileStream) routeTensors(p []byte) []byte {
	tensors := st.hdr.Tensors
	for len(p) > 0 {
		if st.cur == len(tensors) {
			// Bytes after the data section: the batch path stores such a file whole.
			st.switchToBlob("it is longer than its header says")
			return p
		}
		t := tensors[st.cur]
		tlen := t.End - t.Begin
		if st.curOff == 0 {
			st.startRoute(tlen)
		}
		if st.fill == nil {
			st.newFill(st.tensorChunk(tlen))
		}
		take := int(min(int64(len(p)), tlen-st.curOff, int64(streamChunkSize-st.fillLen)))
		copy(st.fill.buf[st.fillLen:], p[:take])
		st.fillLen += take
		st.curOff += int64(take)
		st.pos += int64(take)
		p = p[take:]
		if st.curOff == tlen {
			st.dispatchFill(true)
			st.cur++
			st.curOff = 0
			st.skipEmptyTensors()
		} else if st.fillLen == streamChunkSize {
			st.dispatchFill(false)
		}
	}
	return p
}

// skipEmptyTensors passes the zero-length tensors at the current position: they are
// complete as soon as their offset is reached.
func (st *FileStream) skipEmptyTensors() {
	for tensors := st.hdr.Tensors; st.cur < len(tensors) && tensors[st.cur].End == tensors[st.cur].Begin; st.cur++ {
		st.hashTensorBytes(hashJob{tensor: st.cur, first: true, last: true})
		st.queueJob(streamJob{kind: jobTensor, tensor: st.cur, first: true, last: true})
	}
}

// dispatchFill hands the bytes of the chunk being filled not yet handed over to the worker and
// the hashers. last: they end the current tensor; a pool chunk with room left then takes the
// next tensor's bytes too (stream_batch.go).
func (st *FileStream) dispatchFill(last bool) {
	c, data := st.fill, st.fill.buf[st.fillAt:st.fillLen]
	st.fillAt = st.fillLen
	pooled := c.mem != nil
	if st.class == classSafetensors {
		c.refs.Add(1 + st.hs.hashersOfTensors() + 1) // the worker, the hashers, the seed
		first := st.fillStart == 0
		st.hashTensorBytes(hashJob{c: c, data: data, tensor: st.cur, first: first, last: last})
		st.queueJob(streamJob{kind: jobTensor, c: c, data: data, tensor: st.cur, off: st.fillStart, first: first, last: last, keep: st.keep})
		if last && st.sharesChunk(c) {
			st.fillStart = 0 // the next tensor's first byte
			return
		}
		st.dropFill()
	} else {
		c.refs.Add(3) // the worker, the file's hasher, the seed
		st.hashFileBytes(c, data)
		st.queueJob(streamJob{kind: jobBlob, c: c, data: data})
		st.dropFill()
	}
	if pooled {
		st.flushJobs() // the batch holds no pool chunk but the one being filled
	}
}

// routeBlob copies the bytes of a blob into chunks.
func (st *FileStream) routeBlob(p []byte) []byte {
	for len(p) > 0 {
		if st.fill == nil {
			st.newFill(st.w.pool.get(filePad(st.pos)))
		}
		take := copy(st.fill.buf[st.fillLen:], p)
		st.fillLen += take
		st.pos += int64(take)
		p = p[take:]
		if st.fillLen == streamChunkSize {
			st.dispatchFill(false)
		}
	}
	return p
}

// switchToBlob turns a file that started as safetensors into a blob: the worker replays what
// it has into a whole object and the rest follows. The bytes of a tensor's chunk being
// filled (perhaps not whole elements: the file ended) follow as bytes of the blob.
func (st *FileStream) switchToBlob(reason string) {
	st.class, st.reason = classBlob, reason
	st.queueJob(streamJob{kind: jobBlobStart, fromTensors: true})
	if st.fill != nil && st.fillLen == st.fillAt {
		st.dropFill()
	}
	if st.fill != nil {
		st.dispatchFill(false)
	}
}

// Close ends the file: the last chunk is processed and every object is stored. After it
// returns nil, Writer.AddStream adds the result. On an error the stream is stopped: take the
// bytes back with Replay.
func (st *FileStream) Close() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.state == streamClosed {
		return nil
	}
	if st.state != streamOpen {
		return fmt.Errorf("close %s: %w", st.hint, ErrStreamStopped)
	}
	if err := st.failed(); err == nil {
		switch {
		case st.class == classUndecided:
			st.reason = "it is shorter than its header"
			st.startBlob(classBlob, st.prefix)
		case st.class == classSafetensors && st.size != st.implied:
			// A tensor's chunk being filled is never its last: that one goes at once.
			st.switchToBlob("it is shorter than its header says")
		case st.fill != nil && st.fillLen > st.fillAt:
			st.dispatchFill(false) // the last chunk of a blob
		}
		if st.class != classSafetensors {
			st.queueJob(streamJob{kind: jobFinishBlob})
		}
	}
	st.stopLocked()
	if err := st.failed(); err != nil {
		return fmt.Errorf("stream %s: %w", st.hint, err)
	}
	st.wk.entry.Size = st.size
	st.wk.entry.SHA256 = st.hs.fileSum()
	if st.hs.seed.finish(st.s.mat.seedFiles(), &st.wk.entry, st.size, st.w.v) {
		st.s.log.Info("the seed of the materialized copy was given up: the cache disk did not keep up; the copy's file is brought forward in place after the seal",
			"file", st.hint, "waited", st.hs.seed.waited.Round(time.Millisecond))
	}
	if st.class == classBlobUnsure && batchIsSafetensors(st.prefix, st.size) {
		// The header guess was wrong: the batch path decides.
		st.redo = true
	}
	if st.class != classSafetensors && !st.redo {
		st.logBlob()
	}
	st.state, st.closedOnce = streamClosed, true
	return nil
}

// SHA256 returns the SHA-256 of the file's bytes once Close has succeeded (ok false before),
// even after the stream ended with its Writer: a writer group's rank compares a file with the
// part it sealed (fs).
func (st *FileStream) SHA256() (sum ID, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.wk.entry.SHA256, st.closedOnce
}

// logBlob says why a file is stored whole, as the batch path does.
func (st *FileStream) logBlob() {
	if strings.HasSuffix(st.hint, ".safetensors") || len(st.prefix) >= 9 && st.prefix[8] == '{' {
		st.s.log.Debug("stored as an opaque file", "file", st.hint, "reason", st.reason)
	} else if _, said := st.w.in.saidWhole.LoadOrStore(st.hint, true); !said {
		st.s.log.Debug("not a safetensors file: stored whole", "file", st.hint)
	}
}

// stopLocked ends the pipeline: the worker and the hashers finish what is queued and exit.
func (st *FileStream) stopLocked() {
	if st.jobs == nil {
		return
	}
	if st.fill != nil && st.fillLen == st.fillAt {
		st.dropFill() // a pool chunk shared by the last tensors, all handed over: back to the pool
	}
	st.flushJobs()
	close(st.jobs)
	close(st.hashes)
	close(st.fileHashes)
	<-st.workerDone
	<-st.fin.done
	st.wk.src.close() // its read ahead, if any; then its buffers go
	<-st.hasherDone
	<-st.fileHasherDone
	st.jobs, st.hashes, st.fileHashes = nil, nil, nil
	if st.state == streamOpen {
		st.state = streamStopped
	}
}

// Abort stops the stream and drops everything it holds (temporary files, chunks). Objects it
// stored stay held by the Writer until it ends.
func (st *FileStream) Abort() {
	st.mu.Lock()
	st.stopLocked()
	st.state = streamAborted
	st.releaseLocked()
	st.mu.Unlock()
	st.w.mu.Lock()
	delete(st.w.streams, st)
	st.w.mu.Unlock()
}

// releaseLocked frees the chunks and temporary files of a stopped stream.
func (st *FileStream) releaseLocked() {
	if st.fill != nil {
		st.dropFill()
	}
	for _, j := range st.wk.unprocessed {
		j.release(st.w.pool)
	}
	st.wk.unprocessed = nil
	if ts := st.wk.ts; ts != nil {
		ts.fw.abort()
		st.wk.ts = nil
	}
	st.wk.blob.abort()
	st.wk.blob = nil
	st.hs.seed.drop()
}
