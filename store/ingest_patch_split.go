package store

import (
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/weightfs/weightfs/delta"
)

// The split pass: one patched file over several cores (issue 31, figure 14). The fast path's
// pass (ingest_patch_fast.go) makes a file in order on one goroutine, because the file's
// SHA-256 and the copy's sums are one stream each; a patch of one big file (a trainer's
// model.safetensors) then seals on one core. Here the tensors are made by `workers`
// goroutines at once, each as the pass makes it (its base read once, the patch laid over it,
// encoded, stored, its piece's SHA-256 its identity or the check of its base object), while
// one more goroutine reads the new file again in order (each tensor's base from the
// materialized copy, checked by its sums, with the patch laid over it) for the file's
// SHA-256 and the copy's sums. It costs that second read and one more SHA-256 pass (the
// pieces' digests are no longer taken in the file's pass), for the wall time of the slowest
// of the goroutines. The manifest and objects are the pass's
// (TestCommitPatchFastEqualsReference). addPatchedFiles takes it when the files leave cores
// free: cores / files - 1 goroutines per file, when that is 2 or more. On the 2-core
// development VM it cost 10-45% more CPU than the one pass and its wall time was lost in the
// machine's load (docs/benchmarks.md, figure 14). Where the base in memory holds the base
// version, the goroutines hand each tensor's bytes to the hasher in memory instead of its
// reading the file again (ingest_patch_hand.go), and the split is taken at cores / files
// goroutines per file, when that is 2 or more.

// passSplit makes the tensors of the file of base bf (of version baseV) that cp patches into
// tensors (its manifest entries: names and places filled in) on workers goroutines, and
// returns the new file's SHA-256 and the copy's sums of it. prefix is the new file's header
// bytes, hdr its parse, bases the base tensor of each. errPatchSlow as the pass gives it.
func (w *Writer) passSplit(cp *delta.ChunkPatcher, baseV uint64, bf *manifestFile, prefix []byte,
	hdr *delta.Header, bases []*manifestTensor, tensors []manifestTensor, workers int, x *xxh3Claims) (ID, *fileSums, error) {
	var file ID
	var sums sumWriter
	var fileErr error
	hashed := make(chan struct{})
	// With the base version in memory the makers hand each tensor's bytes to the hasher
	// (ingest_patch_hand.go); else the hasher reads the file again.
	var hands []tensorHand
	stop := make(chan struct{})
	if w.in.mem.holds(baseV) {
		hands = make([]tensorHand, len(hdr.Tensors))
		for i := range hands {
			hands[i].done = make(chan struct{})
		}
	}
	go func() {
		defer close(hashed)
		file, fileErr = w.hashPatchedFile(cp.Fork(), baseV, bf, prefix, hdr, bases, hands, stop, &sums, x)
	}()

	errs := make([]error, len(hdr.Tensors))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, len(hdr.Tensors)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each goroutine takes the next tensor in file order: its patcher's chunks ascend.
			fp := &filePass{path: bf.Path, baseV: baseV, hasher: &pieceHasher{piece: sha256.New()}, cp: cp.Fork()}
			for {
				i := int(next.Add(1) - 1)
				if i >= len(hdr.Tensors) {
					return
				}
				if hands != nil {
					fp.hand = &hands[i]
				}
				errs[i] = w.passTensor(fp, hdr.Tensors[i], bases[i], &tensors[i])
				if hands != nil {
					close(hands[i].done)
				}
				if errs[i] != nil {
					next.Store(int64(len(hdr.Tensors))) // the others stop after their tensor
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-hashed
	giveUp(hands) // those the hasher did not reach
	for _, err := range errs {
		if err != nil {
			return ID{}, nil, err // errPatchSlow unwrapped, as the pass returns it
		}
	}
	if fileErr != nil {
		return ID{}, nil, fileErr
	}
	return file, sums.sums(), nil
}

// hashPatchedFile reads the new file of base bf in order, each tensor's base bytes from the
// materialized copy (checked by its sums) or else through the store's read path, never from
// the base in memory (a reference there would keep the pass from carrying the entry to the
// next version), with cp's changes laid over them, and returns its SHA-256, the copy's sums
// of it written to sums, and both files' bytes to x (the base's header already written).
// With hands (ingest_patch_hand.go), a tensor whose maker handed its bytes is hashed from
// them instead of read again: each waits for its tensor's hand (stop closed: the makers all
// returned; a tensor never made ends the hash, the makers' error says why).
func (w *Writer) hashPatchedFile(cp *delta.ChunkPatcher, baseV uint64, bf *manifestFile, prefix []byte,
	hdr *delta.Header, bases []*manifestTensor, hands []tensorHand, stop <-chan struct{}, sums *sumWriter, x *xxh3Claims) (ID, error) {
	h := sha256.New()
	h.Write(prefix)
	sums.Write(prefix)
	x.Write(prefix)
	end := hdr.DataStart()
	var buf []byte
	for i, t := range hdr.Tensors {
		if hdr.DataStart()+t.Begin != end {
			return ID{}, fmt.Errorf("tensor %s: its data does not follow the tensor before it: %w", t.Name, ErrCorrupt)
		}
		var hd *tensorHand
		if hands != nil {
			hd = &hands[i]
			if !hd.wait(stop) {
				return ID{}, fmt.Errorf("tensor %s: not made", t.Name)
			}
		}
		if hd.handed(t.End-t.Begin, x) {
			x.writeBase(hd.baseB)
			h.Write(hd.newB)
			sums.Write(hd.newB)
			x.Write(hd.newB)
		} else {
			if buf == nil {
				buf = make([]byte, min(bf.Size, ingestChunk))
			}
			if err := w.hashPatchedTensor(cp, baseV, bf.Path, t, bases[i].ID, buf, h, sums, x); err != nil {
				return ID{}, fmt.Errorf("hash file: tensor %s: %w", t.Name, err)
			}
		}
		hd.letGo()
		end = hdr.DataStart() + t.End
	}
	if end != bf.Size {
		return ID{}, fmt.Errorf("its tensors end at %d, the file at %d: %w", end, bf.Size, ErrCorrupt)
	}
	var id ID
	h.Sum(id[:0])
	return id, nil
}

// hashPatchedTensor writes tensor t's new bytes (base object id with cp's changes) to h, sums
// and x, and its base bytes to x, in order.
func (w *Writer) hashPatchedTensor(cp *delta.ChunkPatcher, baseV uint64, path string, t delta.Tensor, id ID, buf []byte,
	h io.Writer, sums *sumWriter, x *xxh3Claims) error {
	b := &tensorBase{w: w, id: id, hint: objHint{path: path, tensor: t.Name}, rd: baseReader{in: w.in}}
	if v := w.s.mat.view(); v != nil && v.holds(id) {
		b.view = v
	} else {
		v.release()
	}
	defer w.releaseBase(b)
	changes := cp.Changes(t.Name)
	size := t.End - t.Begin
	for off := int64(0); off < size; off += ingestChunk {
		n := min(ingestChunk, size-off)
		c, err := b.read(off, n)
		if err != nil {
			return err
		}
		x.writeBase(c)
		if changes {
			c = buf[:copy(buf[:n], c)]
			if err := cp.Patch(c, t.Begin+off); err != nil {
				return patchInputError(err)
			}
		}
		h.Write(c)
		sums.Write(c)
		x.Write(c)
	}
	return nil
}
