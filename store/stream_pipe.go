package store

import (
	"crypto/sha256"
	"hash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weightfs/weightfs/internal/sha256x2"
	"github.com/zeebo/xxh3"
)

// The plumbing of a stream's pipeline: the chunks it moves and the hasher goroutines.

// chunk is a buffer of the pipeline, shared by the worker and the hashers; the last one to
// let go returns it to the pool.
type chunk struct {
	buf     []byte // streamChunkSize bytes of mem
	mem     []byte // the allocation: directAlign-aligned, streamChunkSize+directAlign long
	refs    atomic.Int32
	counted bool // taken within the pool's limit
}

// chunkPool hands out streamChunkSize buffers, at most limit at a time: the bound on the
// memory of every stream of a Writer. get waits while limit chunks are out, since the
// pipelines give chunks back as they work. But a chunk being filled is given back only when
// its writer writes more, and one process may write many files in turn: so a get that has
// waited for overLimitAfter takes a chunk beyond the limit rather than wait for ever.
//
// A chunk's bytes start at the same offset within a page of memory as its first byte's offset
// in the file within a page of the file (get's pad), so that the seed writer can write whole
// pages of it to the file with O_DIRECT, without a copy (copy_seed.go).
type chunkPool struct {
	sem  chan struct{}
	free chan []byte
}

const overLimitAfter = 200 * time.Millisecond

func newChunkPool(limit int) *chunkPool {
	return &chunkPool{sem: make(chan struct{}, limit), free: make(chan []byte, limit)}
}

// get returns a chunk whose buf starts pad bytes (pad < directAlign) into an aligned page.
func (p *chunkPool) get(pad int) *chunk {
	c := &chunk{counted: true}
	select {
	case p.sem <- struct{}{}:
	default:
		t := time.NewTimer(overLimitAfter)
		select {
		case p.sem <- struct{}{}:
		case <-t.C:
			c.counted = false
		}
		t.Stop()
	}
	select {
	case c.mem = <-p.free:
	default:
		c.mem = alignedBuffer(streamChunkSize + directAlign)
	}
	c.buf = c.mem[pad : pad+streamChunkSize]
	return c
}

// filePad is the pad of a chunk whose first byte is at file offset off.
func filePad(off int64) int { return int(off % directAlign) }

func (p *chunkPool) put(c *chunk) {
	if c.mem == nil {
		return // a tensor's buffer in the base in memory (stream_keep.go), not the pool's
	}
	select {
	case p.free <- c.mem:
	default:
	}
	if c.counted {
		<-p.sem
	}
}

// release drops one reference to c.
func (c *chunk) release(p *chunkPool) {
	if c != nil && c.refs.Add(-1) == 0 {
		p.put(c)
	}
}

// hashJob is a piece of the file for a hasher, in file order.
type hashJob struct {
	c           *chunk
	data        []byte
	tensor      int  // the tensor the bytes belong to; -1: none
	first, last bool // the tensor's first and last piece
}

// hasherState is the hashers': the whole file's SHA-256 and the seed (with the sums of the
// copy's file), each tensor's SHA-256. The finisher waits for a tensor's sum when it stores
// the tensor. (A tensor's CRC-32C, computed here for the next version's check of its base,
// is not: that check is the copy's own now, stream_check.go.)
//
// Where sha256x2 can hash the same bytes into two digests in one pass (x86 SHA extensions),
// one goroutine (runHasher) computes both SHA-256s: 1.25x the speed of two passes, and the
// bytes are read once. Elsewhere the tensor hasher and the file hasher (runFileHasher) each
// take one, on a core of their own.
type hasherState struct {
	oneHasher bool                // runHasher computes the file's SHA-256 too
	both      [2]*sha256x2.Digest // oneHasher: the tensor's and the file's
	file      hash.Hash
	tensor    hash.Hash
	// xxh is the tensor's xxh3-128, kept in the manifest beside its id.
	xxh  *xxh3.Hasher128
	cur  int // the tensor being hashed; -1: none
	seed *seedWriter

	mu   sync.Mutex
	cond *sync.Cond
	sums map[int]ID
	xxhs map[int]xxh3Digest

	seedPuts atomic.Int64 // calls of the seed writer (tests: stream_batch.go)
}

// cachePiece is how many bytes one goroutine takes through all its passes before the next
// bytes: few enough to stay in a core's own cache (L2) between the passes. A chunk (4 MiB)
// does not, and the second pass read it from memory again.
const cachePiece = 256 << 10

// init chooses the one-hasher pipeline when oneHasher (ingester.hashInOnePass) says so.
func (h *hasherState) init(oneHasher bool) {
	if h.oneHasher = oneHasher; h.oneHasher {
		h.both = [2]*sha256x2.Digest{sha256x2.New(), sha256x2.New()}
		h.tensor, h.file = h.both[0], h.both[1]
	} else {
		h.file, h.tensor = sha256.New(), sha256.New()
	}
	h.xxh = xxh3.New128()
	h.cur = -1
	h.cond = sync.NewCond(&h.mu)
	h.sums, h.xxhs = map[int]ID{}, map[int]xxh3Digest{}
}

// hashFileBytes queues bytes of the file that are no tensor's (a header, a blob), for the
// file's SHA-256.
func (st *FileStream) hashFileBytes(c *chunk, data []byte) {
	st.queueHash(hashJob{c: c, data: data, tensor: -1}, !st.hs.oneHasher)
}

// hashTensorBytes queues a piece of a tensor, for its SHA-256 and the file's SHA-256.
// The chunk must hold a reference for each hasher (hashersOfTensors) and one for the seed,
// which the hasher of the file's bytes hands on.
func (st *FileStream) hashTensorBytes(j hashJob) {
	if !st.hs.oneHasher && len(j.data) > 0 {
		st.queueHash(hashJob{c: j.c, data: j.data, tensor: -1}, true)
	}
	st.queueHash(j, false)
}

// hashersOfTensors is how many hashers take each piece of a tensor.
func (h *hasherState) hashersOfTensors() int32 {
	if h.oneHasher {
		return 1
	}
	return 2
}

// runFileHasher computes the whole file's SHA-256 (and writes the seed of a first version)
// when runHasher does not (it is not started with oneHasher).
func (st *FileStream) runFileHasher() {
	defer close(st.fileHasherDone)
	h := &st.hs
	var run seedRun
	defer func() { h.seedPuts.Add(int64(run.puts)) }()
	for batch := range st.fileHashes {
		for _, j := range batch {
			h.file.Write(j.data)
			h.seed.sum(j.data)
			run.add(h.seed, st.w.pool, j.c, j.data) // the chunk's reference for the seed
			j.c.release(st.w.pool)
		}
		run.flush(h.seed, st.w.pool)
	}
}

// runHasher computes each tensor's SHA-256 (and, oneHasher, the file's SHA-256 and the sums).
func (st *FileStream) runHasher() {
	defer close(st.hasherDone)
	h := &st.hs
	var run seedRun
	defer func() { h.seedPuts.Add(int64(run.puts)) }()
	var sums []tensorSum // of the batch, published at its end
	for batch := range st.hashes {
		for _, j := range batch {
			if j.tensor < 0 { // oneHasher: bytes of the file outside its tensors
				h.file.Write(j.data)
				h.seed.sum(j.data)
				run.add(h.seed, st.w.pool, j.c, j.data) // the chunk's reference for the seed
				j.c.release(st.w.pool)
				continue
			}
			if j.first {
				h.tensor.Reset()
				h.xxh.Reset()
				h.cur = j.tensor
			}
			// In pieces that stay in the core's cache from the SHA-256s to the sums' CRC.
			for data := j.data; len(data) > 0; {
				piece := data[:min(len(data), cachePiece)]
				data = data[len(piece):]
				h.xxh.Write(piece)
				if h.oneHasher {
					sha256x2.WriteBoth(h.both[0], h.both[1], piece)
					h.seed.sum(piece)
				} else {
					h.tensor.Write(piece)
				}
			}
			if h.oneHasher {
				run.add(h.seed, st.w.pool, j.c, j.data) // the chunk's reference for the seed
			}
			if j.last {
				var id ID
				h.tensor.Sum(id[:0])
				sums = append(sums, tensorSum{j.tensor, id, xxh3Sum(h.xxh.Sum128())})
				h.cur = -1
			}
			j.c.release(st.w.pool)
		}
		run.flush(h.seed, st.w.pool)
		h.publish(sums)
		sums = sums[:0]
	}
}

// tensorSum is a tensor's SHA-256 (its object's name).
type tensorSum struct {
	tensor int
	id     ID
	xxh    xxh3Digest
}

// publish gives the finisher the sums of a batch's tensors at once.
func (h *hasherState) publish(sums []tensorSum) {
	if len(sums) == 0 {
		return
	}
	h.mu.Lock()
	for _, s := range sums {
		h.sums[s.tensor], h.xxhs[s.tensor] = s.id, s.xxh
	}
	h.cond.Broadcast()
	h.mu.Unlock()
}

// tensorSumOf waits for the SHA-256 of tensor i (the finisher's side; the hasher always gets a
// tensor's last piece before the worker does, and the worker hands the tensor over after it).
func (h *hasherState) tensorSumOf(i int) ID {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		if id, ok := h.sums[i]; ok {
			return id
		}
		h.cond.Wait()
	}
}

// tensorXXH3Of is the xxh3-128 of tensor i, once tensorSumOf(i) has returned.
func (h *hasherState) tensorXXH3Of(i int) xxh3Digest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.xxhs[i]
}

// fileSum is the SHA-256 of every byte hashed (after the hasher has exited).
func (h *hasherState) fileSum() ID {
	var id ID
	h.file.Sum(id[:0])
	return id
}
