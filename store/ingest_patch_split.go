package store

import (
	"crypto/sha256"
	"fmt"
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
// one more goroutine reads the new file again in order (the base through the store's
// checked read path with the patch laid over it, as the reference path reads it) for the
// file's SHA-256 and the copy's sums. It costs that second read and one more SHA-256 pass
// (the pieces' digests are no longer taken in the file's pass), about a fifth more CPU, for
// the wall time of the slowest of the goroutines. The manifest and objects are the pass's
// (TestCommitPatchSplitEqualsPass). addPatchedFiles takes it when the files leave cores
// free (GOMAXPROCS / files >= 2).

// passSplit makes the tensors of the file of base bf (of version baseV) that cp patches into
// tensors (its manifest entries: names and places filled in) on workers goroutines, and
// returns the new file's SHA-256 and the copy's sums of it. prefix is the new file's header
// bytes, hdr its parse, bases the base tensor of each. errPatchSlow as the pass gives it.
func (w *Writer) passSplit(cp *delta.ChunkPatcher, baseV uint64, bf *manifestFile, prefix []byte,
	hdr *delta.Header, bases []*manifestTensor, tensors []manifestTensor, workers int) (ID, *fileSums, error) {
	src, err := w.s.OpenFile(baseV, bf.Path)
	if err != nil {
		return ID{}, nil, err
	}
	defer src.Close()

	var file ID
	var sums sumWriter
	var fileErr error
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		h := sha256.New()
		r := &patchedFile{base: src, prefix: prefix, size: bf.Size, cp: cp.Fork()}
		buf := make([]byte, min(bf.Size, ingestChunk))
		for off := int64(0); off < bf.Size; {
			b := buf[:min(int64(len(buf)), bf.Size-off)]
			if fileErr = readAtFull(r, b, off); fileErr != nil {
				fileErr = fmt.Errorf("hash file: %w", fileErr)
				return
			}
			h.Write(b)
			sums.Write(b)
			off += int64(len(b))
		}
		h.Sum(file[:0])
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
				if errs[i] = w.passTensor(fp, hdr.Tensors[i], bases[i], &tensors[i]); errs[i] != nil {
					next.Store(int64(len(hdr.Tensors))) // the others stop after their tensor
					return
				}
			}
		}()
	}
	wg.Wait()
	<-hashed
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
