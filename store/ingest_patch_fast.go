package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/sha256x2"
)

// The patch in, at the patch's cost (issue 31). The reference path (ingest_patch.go:
// addPatchedFile) reads a patched file through Store.OpenFile, lays the patch over it and
// gives every changed tensor to the ingest's tensor job, which reads the base a second time,
// diffs the whole tensor and hashes it, while a third pass hashes the whole file again: the
// CPU of a full commit of the same bytes. Here each patched file is made in one pass, in
// file order:
//
//   - every tensor's base bytes are read once: from the base in memory when it holds the
//     latest version (Options.BaseMemory), else from the materialized copy (the copy's sums
//     check them as they are read, as for any diff), else, while the copy is deferred at the
//     latest version (copy_defer.go: CommitPatch does not bring it forward), through the
//     store's read path (patchBasis);
//   - a changed tensor's new bytes are its base bytes with the patch's values laid over them
//     (delta.ChunkPatcher, the apply's own cursors and index checks), and are encoded by the
//     ingest's own encoder against the same base (DeltaEncoder.AddDiff: elements whose new
//     value equals the base's are no change, as in a full ingest), then stored by the
//     ingest's storeDiffed: a delta or an anchor by the same rules;
//   - one hash pass (sha256x2: two digests per read of the bytes) gives the file's SHA-256
//     and each piece's: a changed tensor's piece digest is its new identity; an unchanged
//     tensor's or the header's must be the object the base names (so its bytes are checked
//     for free), else the bytes read are damage.
//
// The manifest and the objects are those of the reference path (TestCommitPatchFastEqualsReference),
// and so those of a full ingest. Whatever the pass cannot do as the reference would (the
// copy is not at the patch's base, a base tensor is not where the manifest says) goes back
// to the reference path for that file (errPatchSlow). The patch's xxh3-128 claims of the
// changed tensors are compared with the digests the pass takes for their manifest entries
// (xxh3Claims.fromEntry), not hashed a second time.

// errPatchSlow says that the fast path cannot make a file as the reference path would: the
// file goes through the reference path.
var errPatchSlow = errors.New("the patch's fast path does not apply")

// pieceHasher hashes the bytes of a file and of its current piece, in one pass where the CPU
// has the SHA extensions (sha256x2), else as two crypto/sha256 streams.
type pieceHasher struct {
	both        bool
	file, piece hash.Hash // file nil: the piece's digest only (the split pass)
	// xxh is the piece's xxh3-128 (a tensor's, for its manifest entry); pieceXXH3 the last
	// ended piece's.
	xxh       *xxh3.Hasher128
	pieceXXH3 xxh3Digest
}

func newPieceHasher(both bool) *pieceHasher {
	if both {
		return &pieceHasher{both: true, file: sha256x2.New(), piece: sha256x2.New()}
	}
	return &pieceHasher{file: sha256.New(), piece: sha256.New()}
}

func (h *pieceHasher) write(b []byte) {
	if h.xxh == nil {
		h.xxh = xxh3.New128()
	}
	h.xxh.Write(b)
	if h.file == nil { // the split pass: another goroutine hashes the file
		h.piece.Write(b)
		return
	}
	if h.both {
		sha256x2.WriteBoth(h.file.(*sha256x2.Digest), h.piece.(*sha256x2.Digest), b)
		return
	}
	h.file.Write(b)
	h.piece.Write(b)
}

// endPiece returns the digest of the piece written since the last endPiece.
func (h *pieceHasher) endPiece() (id ID) {
	h.piece.Sum(id[:0])
	h.piece.Reset()
	if h.xxh == nil { // an empty piece first: its digest is the empty input's, not zero
		h.xxh = xxh3.New128()
	}
	h.pieceXXH3 = xxh3Sum(h.xxh.Sum128())
	h.xxh.Reset()
	return id
}

// filePass is the state of one patched file's pass.
type filePass struct {
	path   string
	baseV  uint64
	hasher *pieceHasher
	sums   *sumWriter          // the copy's sums of the new file (copy_sums.go); nil in the split pass
	cp     *delta.ChunkPatcher // one for the pass: chunks come in file order
	buf    []byte              // a chunk of new bytes when the memory does not take them
	x      *xxh3Claims         // the patch's xxh3-128 claims (nil: none, or the split pass)
	// hand, in the split pass with the base in memory, takes the current tensor's bytes to
	// the file's hasher (ingest_patch_hand.go); nil: none.
	hand *tensorHand
}

// write takes the next bytes of the file (of the current piece) in order.
func (fp *filePass) write(c []byte) {
	fp.hasher.write(c)
	if fp.sums != nil {
		fp.sums.Write(c)
	}
	fp.x.Write(c)
}

// addPatchedFileFast is addPatchedFile at the patch's cost (above); errPatchSlow: use
// addPatchedFile.
//
// workers > 1 makes the file's tensors on that many goroutines while another hashes the
// file (the split pass, ingest_patch_split.go); else one pass makes the file in order.
func (w *Writer) addPatchedFileFast(p *delta.Patch, pf delta.PatchFile, baseV uint64, bf *manifestFile, workers int) error {
	prefix := make([]byte, bf.HeaderLen)
	if err := w.in.readBase(bf.Header, objHint{path: bf.Path, header: true}, 0, prefix, readOpts{}); err != nil {
		return fmt.Errorf("read the base's header: %w", err)
	}
	basePrefix := prefix
	prefix, hdr, err := patchHeader(pf, bf, prefix)
	if err != nil {
		return err
	}
	cp, err := p.NewChunkPatcher(pf.Name, hdr)
	if err != nil {
		return patchInputError(err)
	}
	x := newXXH3Claims(p, pf, hdr)
	x.knownBase(w.s.renders, bf.SHA256)
	x.fromEntry() // every claimed tensor is changed: the pass hashes it (passChangedTensor)
	x.writeBase(basePrefix)
	bases := make([]*manifestTensor, len(hdr.Tensors))
	for i, t := range hdr.Tensors {
		if bases[i] = baseTensorAt(bf, i, t); bases[i] == nil {
			return errPatchSlow // the reference path says what is wrong
		}
	}
	entry := &manifestFile{Path: bf.Path, Mode: bf.Mode, Size: bf.Size, Kind: kindSafetensors, HeaderLen: bf.HeaderLen}
	if pf.NewHeader == nil {
		entry.Header = bf.Header
		w.hold(entry.Header)
	} else if entry.Header, err = w.storeWhole(bytes.NewReader(prefix), 0, entry.HeaderLen, 1); err != nil {
		return fmt.Errorf("store header: %w", err)
	}
	w.noteFileStart()

	if got := ID(sha256.Sum256(prefix)); got != entry.Header {
		return fmt.Errorf("its header was stored as %s but reads as %s: %w", entry.Header, got, ErrCorrupt)
	}
	entry.Tensors = make([]manifestTensor, len(hdr.Tensors))
	for i, t := range hdr.Tensors {
		entry.Tensors[i] = manifestTensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: t.Begin, End: t.End}
	}
	var sums *fileSums
	if workers > 1 {
		entry.SHA256, sums, err = w.passSplit(cp, baseV, bf, prefix, hdr, bases, entry.Tensors, workers, x)
	} else {
		fp := &filePass{path: bf.Path, baseV: baseV, hasher: newPieceHasher(w.in.hashInOnePass), sums: &sumWriter{}, cp: cp, x: x}
		fp.write(prefix)
		fp.hasher.endPiece()
		for i, t := range hdr.Tensors {
			if err = w.passTensor(fp, t, bases[i], &entry.Tensors[i]); err != nil {
				break
			}
		}
		fp.hasher.file.Sum(entry.SHA256[:0])
		sums = fp.sums.sums()
	}
	if err != nil {
		return err
	}
	x.tensorDigests(entry.Tensors)
	if err := checkPatchedFile(pf, entry.SHA256, x); err != nil {
		return err
	}
	x.note(w.s.renders, entry.SHA256, bf.SHA256)
	w.s.mat.contentChecks().noteSums(keyOf(entry), sums)
	w.in.patchFast.Add(1)
	return w.addEntry(entry)
}

// passTensor makes one tensor of the pass, changed or not as the patch says.
func (w *Writer) passTensor(fp *filePass, t delta.Tensor, bt, et *manifestTensor) error {
	var err error
	if fp.cp.Changes(t.Name) {
		err = w.passChangedTensor(fp, t, bt, et)
	} else {
		err = w.passUnchangedTensor(fp, t, bt, et)
	}
	if err != nil && !errors.Is(err, errPatchSlow) {
		return fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return err
}

// patchHeader is the header of the new file: the base's (prefix, read from it), or the
// patch's new header, which must keep the base's length and tensors in place.
func patchHeader(pf delta.PatchFile, bf *manifestFile, prefix []byte) ([]byte, *delta.Header, error) {
	hdr, err := delta.ParseHeader(prefix, bf.Size)
	if err != nil {
		return nil, nil, fmt.Errorf("the base's header: %w: %w", ErrCorrupt, err)
	}
	if pf.NewHeader != nil {
		nh, err := delta.ParseHeader(pf.NewHeader, bf.Size)
		if err != nil || int64(len(pf.NewHeader)) != bf.HeaderLen || !samePlaces(hdr, nh) {
			return nil, nil, badPatch("its new header does not keep the base's length and tensors in place (%v)", err)
		}
		return pf.NewHeader, nh, nil
	}
	return prefix, hdr, nil
}

// tensorBase reads one base tensor's bytes chunk by chunk: from the base in memory, else from
// the materialized copy (checked by the copy's sums as read), else through the store's read
// path.
type tensorBase struct {
	w    *Writer
	id   ID
	hint objHint
	mem  *memTensor
	view *matView
	rd   baseReader
	buf  []byte
}

func (b *tensorBase) read(off, n int64) ([]byte, error) {
	switch {
	case b.mem != nil:
		return b.mem.b[off : off+n], nil
	case b.view != nil:
		return b.rd.read(b.view, b.id, off, n, nextRead{})
	}
	if int64(len(b.buf)) < n {
		b.buf = make([]byte, n)
	}
	return b.buf[:n], b.w.readBaseObject(b.id, b.hint, off, b.buf[:n])
}

// readBaseObject reads base bytes [off, off+len(p)) of object id through the store's read
// path (counted in BaseMemoryStats.FromObjects).
func (w *Writer) readBaseObject(id ID, h objHint, off int64, p []byte) error {
	w.in.mem.fromObjs.Add(int64(len(p)))
	return w.in.readBase(id, h, off, p, readOpts{})
}

// releaseBase lets go of what b reads from.
func (w *Writer) releaseBase(b *tensorBase) {
	b.rd.release()
	b.view.release()
	w.in.mem.release(b.mem)
}

// passUnchangedTensor hashes a tensor the patch leaves alone (its bytes are the base's, for
// the file's SHA-256) and records it as a full ingest does: its base's object, nothing
// changed. Its piece digest must be that object: bytes from memory that are not drop the
// memory (errMemBase: the file is made again from the copy), bytes from the copy that are
// not mark it broken (the caller rebuilds it and tries again).
func (w *Writer) passUnchangedTensor(fp *filePass, t delta.Tensor, bt *manifestTensor, et *manifestTensor) error {
	size := t.End - t.Begin
	b := &tensorBase{w: w, id: bt.ID, hint: objHint{path: fp.path, tensor: t.Name}, rd: baseReader{in: w.in}}
	if b.mem = w.in.mem.base(fp.baseV, bt.ID, size); b.mem == nil {
		if v := w.s.mat.view(); v != nil && v.holds(bt.ID) {
			b.view = v
		} else {
			v.release()
		}
	}
	defer w.releaseBase(b)
	var keep []byte
	if b.mem == nil { // else the memory's entry is carried into the capture (below)
		keep = w.mem.buffer(size)
	}
	_, knownCRC := w.s.mat.baseCRC(bt.ID)
	var crc uint32
	for off := int64(0); off < size; off += ingestChunk {
		n := min(ingestChunk, size-off)
		c, err := b.read(off, n)
		if err != nil {
			return err
		}
		fp.write(c)
		fp.x.writeBase(c) // the base's bytes too
		if keep != nil || !knownCRC {
			crc = crc32.Update(crc, castagnoli, c)
		}
		if keep != nil {
			copy(keep[off:], c)
		}
	}
	if got := fp.hasher.endPiece(); got != bt.ID {
		switch {
		case b.mem != nil:
			w.in.mem.drop("a base's bytes in memory do not hash to its identity", bt.ID)
			return fmt.Errorf("base object %s in memory: %w", bt.ID, errMemBase)
		case b.view != nil:
			b.view.m.markBroken()
			return fmt.Errorf("the materialized copy of base object %s does not match it (rebuilding the copy): %w", bt.ID, ErrCorrupt)
		}
		return fmt.Errorf("base object %s reads as %s: %w", bt.ID, got, ErrCorrupt)
	}
	if !knownCRC {
		w.s.mat.noteBaseCRC(bt.ID, crc)
	}
	et.ID, et.Base, et.Changed, et.XXH3 = bt.ID, bt.ID, 0, bt.XXH3
	w.hold(bt.ID)
	if b.mem != nil {
		w.in.mem.note(size)
		mem := b.mem
		if fp.hand != nil { // held until the hasher hashed its bytes, then carried
			b.mem = nil
		}
		w.releaseBase(b)
		*b = tensorBase{} // released: the deferred release does nothing
		if fp.hand != nil {
			fp.hand.give(mem.b, mem.b, func() {
				w.in.mem.release(mem)
				w.carryUnchanged(fp.baseV, bt.ID, size)
			})
			return nil
		}
		w.carryUnchanged(fp.baseV, bt.ID, size)
		return nil
	}
	w.mem.add(bt.ID, keep, crc)
	w.in.mem.used(fp.baseV, bt.ID)
	if keep != nil {
		fp.hand.give(keep, keep, nil) // the base's bytes, unchanged, in a buffer of its own
	}
	return nil
}

// carryUnchanged keeps a tensor of the new version that is its base's object, unchanged, for
// the next version's diffs: the base in memory's entry moves into the writer's capture
// (no copy). Where it cannot move (another tensor uses it too), the entry is used as a diff
// would use it, and the tensor is not kept.
func (w *Writer) carryUnchanged(baseV uint64, id ID, size int64) {
	if !w.in.mem.carry(w.mem, baseV, id, size) {
		w.in.mem.used(baseV, id)
	}
}

// passChangedTensor makes a changed tensor's new bytes from its base and the patch, encodes
// its delta against that base as diffTensor does, hashes it, and stores it by the ingest's
// rules (storeDiffed). The base must be the tensor the ingest's diff would take: the same
// tensor of the copy's version, which must be the patch's base (else errPatchSlow).
func (w *Writer) passChangedTensor(fp *filePass, t delta.Tensor, bt *manifestTensor, et *manifestTensor) error {
	s := w.s
	size := t.End - t.Begin
	view, basis := w.patchBasis(fp.baseV)
	if basis == nil {
		return errPatchSlow
	}
	ref, ok := basis.findBase(fp.path, t.Name, t.DType, t.Shape)
	if !ok || ref.tensor.ID != bt.ID {
		view.release()
		return errPatchSlow
	}
	b := &tensorBase{w: w, id: bt.ID, hint: objHint{path: fp.path, tensor: t.Name}, rd: baseReader{in: w.in}, view: view}
	hb := newBaseCheck(s.mat, bt.ID)
	if b.mem = w.in.mem.base(fp.baseV, bt.ID, size); b.mem != nil {
		hb = memBaseCheck(b.mem)
	}
	keep := w.mem.buffer(size)
	body, id, changed, crc, err := w.passChangedBytes(fp, b, hb, t, keep)
	// Handed to the split pass's hasher: the base's entry in memory (its bytes, for
	// base_xxh3) is held until the hasher hashed them (ingest_patch_hand.go).
	mem, handed := b.mem, err == nil && fp.hand != nil && keep != nil
	if handed {
		b.mem = nil
	}
	w.releaseBase(b)
	if err != nil {
		return err
	}
	var src io.ReaderAt = bytes.NewReader(keep)
	if keep == nil {
		src = &patchedTensor{w: w, base: bt.ID, hint: b.hint, cp: fp.cp.Fork(), begin: t.Begin, size: size}
	}
	if err := w.storeDiffed(et, src, ref, body, id, changed); err != nil {
		if handed {
			w.in.mem.release(mem)
		}
		return err
	}
	et.XXH3 = fp.hasher.pieceXXH3 // of the bytes id was taken of (passChangedBytes)
	w.mem.add(id, keep, crc)
	if handed {
		var baseB []byte
		if mem != nil {
			baseB = mem.b
		}
		fp.hand.give(keep, baseB, func() {
			w.in.mem.release(mem)
			w.in.mem.used(fp.baseV, bt.ID)
		})
		return nil
	}
	w.in.mem.used(fp.baseV, bt.ID)
	return nil
}

// patchBasis is the version a changed tensor's diff takes its base from, as the ingest's
// diff would (Writer.baseFor): the copy's version, which must be the patch's base baseV (view
// is the copy's, held: release it), or, while the copy is deferred at baseV (copy_defer.go:
// the base in memory holds it), baseV itself, read from memory or through the store's read
// path (view nil), the copy left where it is. basis nil: neither (the reference path).
func (w *Writer) patchBasis(baseV uint64) (view *matView, basis *version) {
	view = w.s.mat.view()
	if view != nil && view.ver.m.Version == baseV {
		return view, view.ver
	}
	view.release()
	if w.s.mat.deferredTo() != baseV {
		return nil, nil
	}
	if latest, err := w.s.versions.latestVersion(); err == nil && latest != nil && latest.m.Version == baseV {
		return nil, latest
	}
	return nil, nil
}

// passChangedBytes is passChangedTensor's loop over the tensor's chunks (diffTensor's, with
// the new bytes made rather than read).
func (w *Writer) passChangedBytes(fp *filePass, b *tensorBase, hb *baseCheck, t delta.Tensor, keep []byte) (body []byte, id ID, changed int64, crc uint32, err error) {
	s := w.s
	width := t.DType.Size()
	size := t.End - t.Begin
	elems := size / int64(width)
	enc := delta.NewDeltaEncoder(width, t.DType.IsFloat(), elems)
	wc := s.objects.writeContextOf(b.id)
	defer wc.done()
	enc.SetContext(wc.fn())
	var ch delta.Changes
	for off := int64(0); off < size; off += ingestChunk {
		n := min(ingestChunk, size-off)
		base, err := b.read(off, n)
		if err != nil {
			return nil, id, 0, 0, err
		}
		var c []byte
		if keep != nil {
			c = keep[off : off+n]
		} else {
			if len(fp.buf) < int(n) {
				fp.buf = make([]byte, min(size, ingestChunk))
			}
			c = fp.buf[:n]
		}
		copy(c, base)
		fp.x.writeBase(base)
		if err := fp.cp.Patch(c, t.Begin+off); err != nil {
			return nil, id, 0, 0, patchInputError(err)
		}
		fp.write(c)
		crc = crc32.Update(crc, castagnoli, c)
		hb.Write(base)
		found, err := w.in.diffInto(enc, base, c, off/int64(width), width, &ch)
		if err != nil {
			return nil, id, 0, 0, err
		}
		changed += found
		if changed > elems/8 || changed*int64(width+2) > maxDeltaMemory {
			enc = nil // as diffTensor: stored whole
		}
		w.progressAdd(n)
	}
	id = fp.hasher.endPiece()
	if !hb.matches(b.id) {
		if b.mem != nil {
			w.in.mem.drop("a diff's base bytes from memory do not match their CRC-32C", b.id)
			w.progressAdd(-size)
			return nil, id, 0, 0, fmt.Errorf("base object %s in memory: %w", b.id, errMemBase)
		}
		if b.view == nil { // read through the store's read path, which checks what it serves
			return nil, id, 0, 0, fmt.Errorf("base object %s reads as other bytes: %w", b.id, ErrCorrupt)
		}
		b.view.m.markBroken()
		return nil, id, 0, 0, fmt.Errorf("the materialized copy of base object %s does not match it (rebuilding the copy)", b.id)
	}
	s.mat.noteBaseCRC(id, crc)
	if b.mem != nil {
		w.in.mem.note(size)
	}
	if enc != nil && changed > 0 {
		if body, err = enc.Finish(); err != nil {
			return nil, id, 0, 0, fmt.Errorf("encode delta: %w", err)
		}
	}
	return body, id, changed, crc, nil
}

// patchedTensor reads a changed tensor's new bytes again (for a whole copy, when the memory
// did not keep them): its base object through the store's read path, the patch laid over.
type patchedTensor struct {
	w     *Writer
	base  ID
	hint  objHint
	cp    *delta.ChunkPatcher
	begin int64 // the tensor's data offset in its file
	size  int64
}

func (r *patchedTensor) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 || off >= r.size {
		return 0, io.EOF
	}
	var atEnd error
	if rest := r.size - off; int64(len(b)) > rest {
		b, atEnd = b[:rest], io.EOF
	}
	if err := r.w.in.readBase(r.base, r.hint, off, b, readOpts{}); err != nil {
		return 0, err
	}
	if err := r.cp.Patch(b, r.begin+off); err != nil {
		return 0, patchInputError(err)
	}
	return len(b), atEnd
}
