package store

// A stream's jobs go to its pipeline in batches (issue 29: a mixture of experts' checkpoint
// has tens of thousands of tensors of about 50 kB).
//
// The pipeline's goroutines took one job per tensor from channels of a few jobs: with tensors
// of 50 kB, a write of 1 MiB (the mount's FUSE write) made twenty jobs, and the caller of Write,
// the worker, the finisher and the hasher each waited for another about once per tensor (a
// block profile of version 2 of a 3,147-tensor MoE: 6,600 waits, against 320 for a dense
// checkpoint of the same bytes in 102 tensors). Each wait parks a goroutine and each wake-up
// may wait for a thread on a loaded machine, and a queue of three 50 kB jobs let the worker
// run only 150 kB ahead of the writes, where a dense file's queue is three 4 MiB chunks. So
// the jobs of a stream, and its pieces for the hashers, are gathered (pend) and handed over
// when they hold a MiB (streamBatchBytes), when a pool chunk is full, and at Close and Replay:
// each channel carries a MiB or more per item whatever the tensors' sizes, the worker hands
// the finisher the tensors it finished in a batch at once (finisher.flush) and the hasher
// publishes the sums of a batch at once. And a tensor's bytes that go to a pool chunk (no base
// in memory for them: stream_keep.go) share it with the tensors before them instead of
// taking a 4 MiB chunk each: a chunk holds contiguous bytes of the file, so the seed still
// writes whole pages of it (copy_seed.go), and the hasher hands the seed the pieces of a
// chunk that follow each other in one call (seedRun).
//
// The order of everything is the file's, as before: the stored objects and the manifest are
// the same bytes. ingester.streamReference turns batching off (every job handed over at once,
// a chunk per tensor): TestStreamBatchEqualsReference compares the two.

// pendingJobs is the batch being gathered by the caller of Write: jobs for the worker, pieces
// for the hasher of tensors (and, with oneHasher, of the file) and for the hasher of the file.
type pendingJobs struct {
	jobs   []streamJob
	hashes []hashJob
	files  []hashJob
	bytes  int // of the jobs' data

	queued, batches int // jobs queued and batches sent to the worker, in all (tests)
}

// streamBatchBytes is how many bytes of jobs a batch gathers before it goes: the mount's
// largest write. Not more: every byte in the pipeline holds a tensor's buffer in the base in
// memory that the memory cannot yet take back for the next tensors (fresh pages to touch),
// and the queues hold streamQueue batches.
const streamBatchBytes = 1 << 20

// queueJob adds a job for the worker after the pieces for the hashers queued before it; the
// batch goes once it holds streamBatchBytes (at once without batching).
func (st *FileStream) queueJob(j streamJob) {
	st.pend.jobs = append(st.pend.jobs, j)
	st.pend.bytes += len(j.data)
	st.pend.queued++
	if !st.batch || st.pend.bytes >= streamBatchBytes {
		st.flushJobs()
	}
}

// queueHash adds a piece for the hasher of tensors (file: for the hasher of the file).
func (st *FileStream) queueHash(j hashJob, file bool) {
	if file {
		st.pend.files = append(st.pend.files, j)
	} else {
		st.pend.hashes = append(st.pend.hashes, j)
	}
}

// flushJobs hands the batch gathered to the pipeline: the hashers first (the finisher waits
// for a tensor's SHA-256, which the hasher computes from pieces it was given before the
// worker's), then the worker. The receivers own the slices.
func (st *FileStream) flushJobs() {
	p := &st.pend
	if len(p.files) > 0 {
		st.fileHashes <- p.files
	}
	if len(p.hashes) > 0 {
		st.hashes <- p.hashes
	}
	if len(p.jobs) > 0 {
		st.jobs <- p.jobs
		p.batches++
	}
	*p = pendingJobs{queued: p.queued, batches: p.batches}
}

// newFill makes c the chunk being filled; the router holds a reference to it until dropFill.
func (st *FileStream) newFill(c *chunk) {
	c.refs.Store(1)
	st.fill, st.fillLen, st.fillAt, st.fillStart = c, 0, 0, st.curOff
}

// dropFill lets go of the chunk being filled (its bytes before fillAt are the pipeline's).
func (st *FileStream) dropFill() {
	st.fill.release(st.w.pool)
	st.fill = nil
}

// sharesChunk says whether the next tensor's bytes go on into c: a pool chunk with room left,
// when batching.
func (st *FileStream) sharesChunk(c *chunk) bool {
	return st.batch && c.mem != nil && st.fillLen < streamChunkSize
}

// seedRun gathers pieces of one chunk that follow each other in the file, for one call of the
// seed writer (a pool chunk holds the bytes of many small tensors). n is the number of pieces,
// each holding a reference to c for the seed.
type seedRun struct {
	c    *chunk
	data []byte
	n    int
	puts int // calls of the seed writer, in all (tests)
}

// add takes the next piece of the file for the seed (with its reference to c).
func (r *seedRun) add(w *seedWriter, p *chunkPool, c *chunk, data []byte) {
	if r.n > 0 && c != nil && c == r.c && follows(r.data, data) {
		r.data = r.data[:len(r.data)+len(data)]
		r.n++
		return
	}
	r.flush(w, p)
	r.c, r.data, r.n = c, data, 1
}

// flush hands the pieces gathered to the seed writer, which takes one reference; the others go.
func (r *seedRun) flush(w *seedWriter, p *chunkPool) {
	if r.n == 0 {
		return
	}
	w.put(r.c, r.data)
	r.puts++
	for range r.n - 1 {
		r.c.release(p)
	}
	*r = seedRun{puts: r.puts}
}

// follows says whether b's bytes come right after a's in memory (both pieces of one buffer).
func follows(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && cap(a) >= len(a)+len(b) && &a[:len(a)+1][len(a)] == &b[0]
}
