package store

import "github.com/weightfs/weightfs/delta"

// A stream's tensors routed straight into the base in memory (ingest_basemem.go).
//
// With the base in memory on, every byte of a tensor ends in the buffer the next version's
// diff reads it from. The reference pipeline moved each byte twice to get it there: Write
// copied it from the FUSE request into a pool chunk, and the worker copied it from the chunk
// into the buffer (a quarter of the daemon's CPU on a version 2 with the base in memory, more
// than the CRC-32C checks together). Here Write copies it into the buffer itself, and the
// pipeline's chunks are pieces of that buffer: the worker, the hashers and Replay read the
// same bytes as before, at the same places in the file, and nothing else writes the buffer
// (it is the stream's alone until the finisher hands it to the memory, after the tensor's
// last job). The worker still takes the CRC-32C of the bytes as it reads them for the diff.
//
// Not with a seed (copy_seed.go): the seed writes whole pages of the pool's chunks with
// O_DIRECT, which need a chunk to start at its file offset's place within a page
// (chunkPool.get's pad); nor for a tensor the memory does not keep (over the budget). Those
// take pool chunks and the worker's copy, as does every stream when ingester.streamReference
// is set (tests compare the two: TestStreamFastEqualsReference).
//
// The worker's passes over a chunk's bytes (the CRC-32C of the bytes kept, the CRC-32C check
// of the base's bytes, the diff and its encoder) go piece by piece, cachePiece bytes at a
// time (workPiece), so that each piece of the chunk and of its base is read from memory once
// and stays in the core's cache for the next pass: in three passes of a whole chunk (4 MiB)
// each read it from memory again. The encoder's output does not depend on how a tensor's
// elements are cut into calls (DeltaEncoder.AddDiff: elements in ascending order), and the
// rule that gives up the delta for a whole copy is applied at the same points (after each
// chunk), so the objects stored are the same bytes.

// startRoute is called at the first byte of each tensor with bytes (tlen of them): with
// keepRoute, its buffer in the base in memory is taken, and a pool chunk still being filled
// with the tensors before it is let go (the tensor's bytes go to its buffer).
func (st *FileStream) startRoute(tlen int64) {
	if !st.keepRoute {
		return
	}
	if st.keep = st.w.mem.buffer(tlen); st.keep != nil && st.fill != nil {
		st.dropFill()
	}
}

// tensorChunk returns the chunk for the next bytes of the current tensor (tlen bytes long):
// a piece of its buffer in the base in memory when it has one (startRoute), else a pool chunk.
func (st *FileStream) tensorChunk(tlen int64) *chunk {
	if st.keep != nil {
		// Not counted in the pool (put leaves it alone): the memory's budget bounds it.
		return &chunk{buf: st.keep[st.curOff:min(tlen, st.curOff+streamChunkSize)]}
	}
	return st.w.pool.get(filePad(st.pos))
}

// workPiece is how many bytes of a chunk of n bytes the worker takes through its passes at
// a time: cachePiece with the CPU diff, else the whole chunk (a GPU backend diffs in large
// calls; streamReference: the reference).
func (st *FileStream) workPiece(n int) int {
	if st.w.in.streamReference || !delta.IsCPUDiff(st.w.in.diff) {
		return max(n, 1)
	}
	return cachePiece
}

// routedTo says whether data is keep's bytes at off already (routed there by Write).
func routedTo(keep []byte, off int64, data []byte) bool {
	return len(data) > 0 && off < int64(len(keep)) && &keep[off] == &data[0]
}
