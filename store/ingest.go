package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/sha256x2"
)

// ingestChunk is how much of a tensor is read, diffed and hashed at a time: ingest never
// holds a whole file or tensor in memory.
const ingestChunk = 4 << 20

// maxDeltaMemory bounds what one tensor's delta encoder may hold (at most about width+2
// bytes a change): a tensor changing more than that is stored whole.
const maxDeltaMemory = 256 << 20

// ingester is the write side of the store: the open Writers (ingest_writer.go) and the objects
// they hold from gc until a seal names them (pending), the tensor jobs' tokens, the diff
// backend (also Diff's: ingest_diff.go) and the choices of a batch ingest (this file) and a stream
// (stream.go) that tests change. Writers and streams are its users; gc asks it what the
// open writers hold (gc.go), Close which writers are open.
//
// What it needs of the rest of the store it gets through st: the backend, the materialized
// copy it diffs against, objects' metas; and the read path only through readBase.
type ingester struct {
	st   *Store
	diff delta.DiffBackend // never nil: the CPU backend unless Options.Diff names another

	workers chan struct{} // one token per concurrent tensor job
	// baseBufs are the base readers' O_DIRECT buffers given back after a tensor, for the
	// next (stream_base.go).
	baseBufs freeList[[]byte]
	// saidWhole: path -> true: logged that this non-safetensors file is stored whole.
	saidWhole sync.Map
	// hashInOnePass: a file's and its tensors' SHA-256 in one pass (sha256x2) where the CPU
	// has the SHA extensions; a field so that tests run both pipelines.
	hashInOnePass bool
	// patchReference makes CommitPatch take its reference path for every file (tests
	// compare the fast path with it: ingest_patch_fast.go).
	patchReference bool
	patchFast      atomic.Int64 // files the fast path made (tests)
	// patchSplit, when not 0, is how many goroutines make one patched file's tensors (tests
	// run both passes: ingest_patch_split.go); 0 lets the patch's file count decide.
	patchSplit int
	// streamReference makes streams take their reference path (stream_keep.go): each
	// tensor's bytes copied from their chunks into the base in memory's buffer rather than
	// routed there, and the worker's passes over whole chunks; tests compare the two.
	streamReference bool
	// manifestLimit is the manifest JSON length a seal accepts: maxManifestLen, the readers'
	// bound; a field so that a test can reach the refusal with a small version.
	manifestLimit uint64
	// now is the clock of manifests' creation times (time.Now; a test that pins the stored
	// bytes fixes it).
	now func() time.Time
	// mem is the latest version's tensors in memory, the next version's bases
	// (Options.BaseMemory: ingest_basemem.go).
	mem *baseMemory

	pendMu    sync.Mutex
	pending   map[ID]int         // objects written by open Writers, not yet in a manifest
	open      map[uint64]*Writer // versions being written
	leftovers bool               // objects a finished writer put but no manifest uses
}

func newIngester(st *Store, diff delta.DiffBackend) *ingester {
	if diff == nil {
		diff = delta.NewCPUDiff()
	}
	return &ingester{st: st, diff: diff, workers: make(chan struct{}, max(1, runtime.GOMAXPROCS(0))),
		hashInOnePass: sha256x2.Accelerated(), manifestLimit: maxManifestLen, now: time.Now,
		pending: map[ID]int{}, open: map[uint64]*Writer{},
		baseBufs: freeList[[]byte]{max: 2*max(1, runtime.GOMAXPROCS(0)) + 2},
		mem:      newBaseMemory(st.opts.BaseMemory, st.log)}
}

// openWriters returns the Writers open now (Close aborts them).
func (in *ingester) openWriters() []*Writer {
	in.pendMu.Lock()
	defer in.pendMu.Unlock()
	writers := make([]*Writer, 0, len(in.open))
	for _, w := range in.open {
		writers = append(writers, w)
	}
	return writers
}

// clean reports whether no writer is open, none holds an object and none left objects that
// no manifest uses: the writer's index may say that no sweep is needed at the next open.
func (in *ingester) clean() bool {
	in.pendMu.Lock()
	defer in.pendMu.Unlock()
	return len(in.pending) == 0 && len(in.open) == 0 && !in.leftovers
}

// pendingRoots adds the objects open writers hold to into (gc's roots).
func (in *ingester) pendingRoots(into map[ID]bool) {
	in.pendMu.Lock()
	defer in.pendMu.Unlock()
	for id := range in.pending {
		into[id] = true
	}
}

// unlessHeld calls del unless an open writer holds object id, under the lock a writer takes
// to hold an object, so that no writer takes hold of it in between. held says that it did not
// call del.
func (in *ingester) unlessHeld(id ID, del func() error) (held bool, err error) {
	in.pendMu.Lock()
	defer in.pendMu.Unlock()
	if in.pending[id] > 0 {
		return true, nil
	}
	return false, del()
}

// swept notes that a sweep removed the objects finished writers left, and says whether no
// writer is open (then no object of this process's writers is left to sweep).
func (in *ingester) swept() (noneOpen bool) {
	in.pendMu.Lock()
	defer in.pendMu.Unlock()
	in.leftovers = false
	return len(in.open) == 0
}

// lowestFloor is the lowest of the open writers' floors, the versions they may take delta
// bases from (0: none open, or none has one).
func (in *ingester) lowestFloor() uint64 {
	in.pendMu.Lock()
	defer in.pendMu.Unlock()
	var floor uint64
	for _, w := range in.open {
		if w.floor != 0 && (floor == 0 || w.floor < floor) {
			floor = w.floor
		}
	}
	return floor
}

// readBase reads bytes [off, off+len(p)) of object id through the store's read path: the
// one way ingest reads objects other than from the materialized copy (a base the copy does
// not hold, or holds damaged; a stream's result read back: stream_replay.go).
func (in *ingester) readBase(id ID, h objHint, off int64, p []byte, o readOpts) error {
	return in.st.objects.readObject(id, h, off, p, o)
}

// readAtFull reads len(b) bytes of r at off; io.EOF with a full read is success.
func readAtFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("short read of %d bytes at %d: the file shrank", len(b), off)
	}
	return err
}

// ingestFile stores one file's objects and returns its manifest entry.
//
// The file's SHA-256 must be of the bytes stored: a source that a writer changes while it is
// read (a trainer still saving, rsync --inplace) must not seal a file hash its objects do not
// have. A file stored whole is read once, and its object's identity is its SHA-256. A
// safetensors file's header is read once and stored from the bytes parsed; its tensors are
// read by the tensor jobs, and the whole file's SHA-256 by one sequential pass beside them,
// which also hashes the header's and each tensor's bytes: they must hash to the objects
// stored, else two reads of the source disagreed and the file is refused (ErrSourceChanged).
func (w *Writer) ingestFile(p string, r io.ReaderAt, size int64, mode fs.FileMode) (*manifestFile, error) {
	entry := &manifestFile{Path: p, Mode: uint32(mode.Perm()), Size: size}
	prefix, hdr, err := readHeader(r, size)
	if err != nil && !errors.Is(err, delta.ErrMalformed) {
		return nil, err
	}
	if err != nil {
		if strings.HasSuffix(p, ".safetensors") || size >= 8 && looksLikeSafetensors(r) {
			w.s.log.Debug("stored as an opaque file", "file", p, "err", err)
		} else if _, said := w.in.saidWhole.LoadOrStore(p, true); !said {
			// Said once per path: config.json is not news at every version.
			w.s.log.Debug("not a safetensors file: stored whole", "file", p)
		}
		entry.Kind = kindBlob
		if entry.ID, err = w.storeWhole(r, 0, size, 1); err != nil {
			return nil, err
		}
		entry.SHA256 = entry.ID // the object's content is the file
		return entry, nil
	}
	// The pieces of the file: the header, then each tensor (contiguous, in file order).
	ends := make([]int64, 0, 1+len(hdr.Tensors))
	ends = append(ends, hdr.DataStart())
	for _, t := range hdr.Tensors {
		ends = append(ends, hdr.DataStart()+t.End)
	}
	var sums []ID
	var copySums sumWriter // the copy's sums of this content, from the bytes hashed (copy_sums.go)
	var shaErr error
	var shaDone sync.WaitGroup
	shaDone.Add(1)
	go func() {
		defer shaDone.Done()
		entry.SHA256, sums, shaErr = hashPieces(r, ends, &copySums, w.in.hashInOnePass)
	}()
	entry.Kind = kindSafetensors
	err = w.ingestSafetensors(entry, r, hdr, prefix)
	shaDone.Wait()
	if err == nil {
		err = shaErr
	}
	if err != nil {
		return nil, err
	}
	if sums[0] != entry.Header {
		return nil, fmt.Errorf("%s: its header was stored as %s but reads as %s: %w", p, entry.Header, sums[0], ErrSourceChanged)
	}
	for i := range entry.Tensors {
		if t := &entry.Tensors[i]; sums[i+1] != t.ID {
			return nil, fmt.Errorf("%s: tensor %s was stored as %s but reads as %s: %w", p, t.Name, t.ID, sums[i+1], ErrSourceChanged)
		}
	}
	w.s.mat.contentChecks().noteSums(keyOf(entry), copySums.sums())
	return entry, nil
}

// readHeader reads and parses a safetensors header (delta.ReadHeader), returning the bytes
// parsed too: they are what is stored as the header object.
func readHeader(r io.ReaderAt, size int64) ([]byte, *delta.Header, error) {
	var first8 [8]byte
	if size >= 8 {
		if err := readAtFull(r, first8[:], 0); err != nil {
			return nil, nil, fmt.Errorf("read safetensors header length: %w", err)
		}
	}
	n, err := delta.HeaderLength(first8[:], size)
	if err != nil {
		return nil, nil, err
	}
	prefix := make([]byte, 8+n)
	copy(prefix, first8[:])
	if err := readAtFull(r, prefix[8:], 8); err != nil {
		return nil, nil, fmt.Errorf("read safetensors header of %d bytes: %w", n, err)
	}
	hdr, err := delta.ParseHeader(prefix, size)
	return prefix, hdr, err
}

// looksLikeSafetensors reports whether a file starts like one (a header length, then "{"),
// to tell a damaged safetensors file from some other file in the log.
func looksLikeSafetensors(r io.ReaderAt) bool {
	var b [9]byte
	if n, _ := r.ReadAt(b[:], 0); n < 9 {
		return false
	}
	return b[8] == '{'
}

// hashPieces reads r once from 0 to the last of ends (ascending, at least one) and returns
// the SHA-256 of it all and of each piece [ends[i-1], ends[i]) (from 0 for the first): with
// both (the SHA extensions: ingester.hashInOnePass) both digests in one pass (sha256x2), else
// one after the other. Every
// byte read is also written to also (the copy's sums), so they come from the bytes hashed.
func hashPieces(r io.ReaderAt, ends []int64, also io.Writer, both bool) (file ID, pieces []ID, err error) {
	var fileH, pieceH hash.Hash
	var pair [2]*sha256x2.Digest
	if both {
		pair = [2]*sha256x2.Digest{sha256x2.New(), sha256x2.New()}
		fileH, pieceH = pair[0], pair[1]
	} else {
		fileH, pieceH = sha256.New(), sha256.New()
	}
	pieces = make([]ID, len(ends))
	piece := 0
	closePieces := func(off int64) {
		for piece < len(ends) && ends[piece] == off {
			pieceH.Sum(pieces[piece][:0])
			pieceH.Reset()
			piece++
		}
	}
	closePieces(0)
	size := ends[len(ends)-1]
	buf := make([]byte, min(size, ingestChunk))
	for off := int64(0); off < size; {
		b := buf[:min(int64(len(buf)), size-off)]
		if err := readAtFull(r, b, off); err != nil {
			return ID{}, nil, fmt.Errorf("hash file: %w", err)
		}
		also.Write(b)
		for len(b) > 0 {
			take := b[:min(int64(len(b)), ends[piece]-off)]
			if both {
				sha256x2.WriteBoth(pair[0], pair[1], take)
			} else {
				fileH.Write(take)
				pieceH.Write(take)
			}
			b = b[len(take):]
			off += int64(len(take))
			closePieces(off)
		}
	}
	fileH.Sum(file[:0])
	return file, pieces, nil
}

func (w *Writer) ingestSafetensors(entry *manifestFile, r io.ReaderAt, hdr *delta.Header, prefix []byte) error {
	entry.HeaderLen = hdr.DataStart()
	var err error
	if entry.Header, err = w.storeWhole(bytes.NewReader(prefix), 0, entry.HeaderLen, 1); err != nil {
		return fmt.Errorf("store header: %w", err)
	}
	entry.Tensors = make([]manifestTensor, len(hdr.Tensors))
	errs := make([]error, len(hdr.Tensors))
	for i, t := range hdr.Tensors {
		entry.Tensors[i] = manifestTensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: t.Begin, End: t.End}
	}
	// A job takes a slot of w.in.workers (bounds concurrent tensor jobs: memory and cores)
	// and then ingests tensors, the next not yet taken each time, until none is left: with
	// tens of thousands of small tensors (MoE), a goroutine each grew a fresh stack each.
	var next atomic.Int64
	n := int64(len(hdr.Tensors))
	var wg sync.WaitGroup
	for next.Load() < n {
		w.in.workers <- struct{}{}
		if next.Load() >= n {
			<-w.in.workers
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-w.in.workers; wg.Done() }()
			for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
				errs[i] = w.ingestTensor(entry.Path, r, entry.HeaderLen, &entry.Tensors[i])
				if errs[i] != nil {
					errs[i] = fmt.Errorf("tensor %s: %w", hdr.Tensors[i].Name, errs[i])
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ingestTensor stores one tensor: nothing if unchanged or already stored, else a delta
// against the same tensor of the latest version or a whole copy (no base, or the anchor
// policy says so).
func (w *Writer) ingestTensor(path string, r io.ReaderAt, dataStart int64, t *manifestTensor) error {
	s := w.s
	width := t.DType.Size()
	size := t.End - t.Begin
	elems := size / int64(width)
	xr := newXXH3Reader(io.NewSectionReader(r, dataStart+t.Begin, size), size) // the manifest's xxh3, in the id's pass
	defer func() { t.XXH3 = xr.sum() }()
	var src io.ReaderAt = xr
	// The tensor's bytes are kept for the next version's diff when the memory takes them
	// (ingest_basemem.go): read into keep as they are hashed.
	keep := w.mem.buffer(size)

	view := s.mat.view()
	// The base is found in the copy's version, or in the latest version's bytes in memory
	// while the copy is deferred (copy_defer.go; view may then be replaced or dropped).
	basis, base, haveBase, mem, err := w.baseFor(&view, path, t, size)
	if err != nil {
		view.release()
		return err
	}
	if !haveBase {
		view.release()
		t.Changed = elems
		if keep != nil {
			src = captureReader{r: src, buf: keep}
		}
		id, err := w.storeWhole(src, 0, size, width)
		t.ID = id
		w.progressAdd(size)
		if err == nil {
			w.mem.add(id, keep, crc32.Checksum(keep, castagnoli))
		}
		return err
	}
	// The copy stays at this version until the diff is done (seals wait for us).
	baseVer := basis.m.Version
	body, id, changed, crc, err := w.diffTensor(src, view, base.tensor.ID, size, width, t.DType.IsFloat(), mem, keep, false)
	if errors.Is(err, errMemBase) {
		// The base in memory failed its check (it is dropped): diffed again from the copy.
		body, id, changed, crc, err = w.diffTensor(src, view, base.tensor.ID, size, width, t.DType.IsFloat(), nil, keep, false)
	}
	if errors.Is(err, errCopyBase) {
		// The copy's bytes failed the base's check (the copy is being rebuilt): diffed
		// again from the objects.
		body, id, changed, crc, err = w.diffTensor(src, view, base.tensor.ID, size, width, t.DType.IsFloat(), nil, keep, true)
	}
	view.release()
	w.in.mem.release(mem)
	if err != nil {
		return err
	}
	if err := w.storeDiffed(t, src, base, body, id, changed); err != nil {
		return err
	}
	w.mem.add(id, keep, crc)
	w.in.mem.used(baseVer, base.tensor.ID)
	return nil
}

// storeDiffed stores a tensor diffed against base (id, body and changed from diffTensor):
// nothing when it is the base or already stored, a delta object, or an anchor.
func (w *Writer) storeDiffed(t *manifestTensor, src io.ReaderAt, base tensorRef, body []byte, id ID, changed int64) error {
	s := w.s
	width := t.DType.Size()
	size := t.End - t.Begin
	t.ID, t.Base, t.Changed = id, base.tensor.ID, changed
	if id == base.tensor.ID {
		w.hold(id)
		return nil
	}
	w.hold(id)
	if w.in.existsToWrite(id) {
		return nil
	}
	bm, err := s.objects.meta(base.tensor.ID)
	if err != nil {
		if !isDamage(err) {
			return fmt.Errorf("base: %w", err)
		}
		// The base's own chain is damaged (an object behind it is missing or fails its
		// check): a delta on it could only be read through the materialized copy, so the
		// tensor is stored whole, without a link.
		s.log.Warn("the base's chain of deltas is damaged: tensor stored whole", "tensor", t.Name, "base", base.tensor.ID.String(), "err", err)
		return w.writeFull(src, size, width, id, ID{}, nil)
	}
	chainBytes := int64(len(body))
	depth := 1
	if bm.Kind == kindDelta {
		chainBytes += bm.ChainBytes
		depth = bm.Depth + 1
	}
	if body != nil && depth <= s.maxChain && chainBytes < size {
		file := encodeDeltaObject(id, width, size, base.tensor.ID, body)
		if err := putObjectBytes(s.be, id, file); err != nil {
			return err
		}
		s.objects.wroteDelta(id, file) // for the seal's bring-forward of the copy
		w.noteCreated(id, int64(len(file)))
		s.objects.putMeta(id, objMeta{Kind: kindDelta, Width: width, Base: base.tensor.ID, ContentLen: size,
			FileSize: int64(len(file)), DeltaLen: int64(len(body)), Depth: depth, ChainBytes: chainBytes})
		return nil
	}
	// An anchor: a whole copy, carrying the (small) delta from its base as a link so reads can
	// walk back over it and the materialized copy moves forward cheaply.
	link := body
	if int64(len(link)) > size/4 {
		link = nil
	}
	return w.writeFull(src, size, width, id, base.tensor.ID, link)
}

// diffTensor reads the new tensor from src and its base from the materialized copy in
// chunks, hashing the new bytes and encoding the changed elements. body is nil when more than
// an eighth of the elements changed (a whole copy is then about as small) or the encoded
// changes could exceed maxDeltaMemory. mem, when not nil, is the base's content in memory,
// read instead of the copy (errMemBase: it failed its check, and the memory is dropped);
// keep, when not nil, receives the new bytes (the next version's base in memory). crc is the
// CRC-32C of the new bytes. The base's bytes from the copy are read without its sums where
// the page cache holds them (baseReader.checksWhole: the base check covers them); when they
// fail the base check the copy is marked broken and the error is errCopyBase: the caller
// diffs again with fromObjects, which reads the base from the objects.
func (w *Writer) diffTensor(src io.ReaderAt, view *matView, baseID ID, size int64, width int, float bool, mem *memTensor, keep []byte, fromObjects bool) (body []byte, id ID, changed int64, crc uint32, err error) {
	s := w.s
	elems := size / int64(width)
	enc := delta.NewDeltaEncoder(width, float, elems)
	// Coded against the base's own delta section when it has one (object_delta_context.go).
	wc := s.objects.writeContextOf(baseID)
	defer wc.done()
	enc.SetContext(wc.fn())
	h := sha256.New()
	// The base bytes are checked too: a delta computed against a damaged copy would be a
	// wrong object, forever. With the CRC of the base's content when it is known, as the
	// streaming path does (ingest_basecheck.go), else with SHA-256; bytes from memory with
	// the CRC taken with them (ingest_basemem.go).
	hb := newBaseCheck(s.mat, baseID)
	if mem != nil {
		hb = memBaseCheck(mem)
	}
	var cur []byte
	if keep == nil {
		// Pooled: a MoE version diffs tens of thousands of small tensors, and a fresh
		// buffer each was a large allocation (cleared) per tensor.
		bp := diffChunks.Get().(*[]byte)
		defer diffChunks.Put(bp)
		cur = (*bp)[:min(size, ingestChunk)]
	}
	// Reads a cold copy with O_DIRECT, and ahead (stream_base.go).
	base := baseReader{in: w.in, checksWhole: true, objects: fromObjects}
	defer base.release()
	var ch delta.Changes
	for off := int64(0); off < size; off += ingestChunk {
		n := min(ingestChunk, size-off)
		var c []byte
		if keep != nil {
			c = keep[off : off+n]
		} else {
			c = cur[:n]
		}
		if err := readAtFull(src, c, off); err != nil {
			return nil, id, 0, 0, err
		}
		var b []byte
		if mem != nil {
			b = mem.b[off : off+n]
		} else if b, err = w.readBaseAt(&base, view, baseID, off, n); err != nil {
			return nil, id, 0, 0, err
		}
		h.Write(c)
		crc = crc32.Update(crc, castagnoli, c)
		hb.Write(b)
		found, err := w.in.diffInto(enc, b, c, off/int64(width), width, &ch)
		if err != nil {
			return nil, id, 0, 0, err
		}
		changed += found
		if changed > elems/8 || changed*int64(width+2) > maxDeltaMemory {
			// Not an RL step: a whole copy is about as small, and the encoder's memory
			// stays bounded.
			enc = nil
		}
		w.progressAdd(n)
	}
	h.Sum(id[:0])
	s.mat.noteBaseCRC(id, crc)
	if !hb.matches(baseID) {
		if mem != nil {
			w.in.mem.drop("a diff's base bytes from memory do not match their CRC-32C", baseID)
			w.progressAdd(-size)
			return nil, id, 0, 0, fmt.Errorf("base object %s in memory: %w", baseID, errMemBase)
		}
		w.progressAdd(-size)
		if view == nil { // read through the objects (readBaseAt), every byte checked there
			return nil, id, 0, 0, fmt.Errorf("base object %s: its bytes do not match it: %w", baseID, ErrCorrupt)
		}
		if !fromObjects {
			s.log.Warn(fmt.Sprintf("materialized copy: base object %s read from it does not match its identity or CRC-32C: not served; the tensor is diffed from the objects and the copy is rebuilt", baseID))
			view.m.markBroken()
			return nil, id, 0, 0, fmt.Errorf("the materialized copy of base object %s does not match it (rebuilding the copy): %w", baseID, errCopyBase)
		}
		return nil, id, 0, 0, fmt.Errorf("base object %s does not match its identity or CRC: %w", baseID, ErrCorrupt)
	}
	if mem != nil {
		w.in.mem.note(size)
	}
	if enc != nil && changed > 0 {
		if body, err = enc.Finish(); err != nil {
			return nil, id, 0, 0, fmt.Errorf("encode delta: %w", err)
		}
	}
	return body, id, changed, crc, nil
}

// diffChunks holds diffTensor's buffers of the new tensor's bytes (*[]byte of ingestChunk).
var diffChunks = sync.Pool{New: func() any { b := make([]byte, ingestChunk); return &b }}

// errCopyBase says that base bytes read from the materialized copy failed the base's check
// (the copy is marked broken; the caller diffs again from the objects).
var errCopyBase = errors.New("the materialized copy's base does not match its check")

// diffInto diffs the chunk cur against its base bytes, elements [first, ...) of the tensor,
// and adds the changes to enc unless it is nil; it returns how many elements changed. With
// the CPU backend the encoder diffs itself (AddDiff, fused); another backend's list of
// changes is added to it. ch is scratch space.
func (in *ingester) diffInto(enc *delta.DeltaEncoder, base, cur []byte, first int64, width int, ch *delta.Changes) (int64, error) {
	if enc != nil && delta.IsCPUDiff(in.diff) {
		found, err := enc.AddDiff(first, base, cur)
		if err != nil {
			return 0, fmt.Errorf("encode delta: %w", err)
		}
		return int64(found), nil
	}
	ch.Reset()
	if err := in.diff.Diff(base, cur, width, ch); err != nil {
		return 0, fmt.Errorf("diff (%s): %w", in.diff.Name(), err)
	}
	if enc != nil && len(ch.Index) > 0 {
		if err := enc.AddChanges(first, base, ch); err != nil {
			return 0, fmt.Errorf("encode delta: %w", err)
		}
	}
	return int64(len(ch.Index)), nil
}

// exists reports whether object id is stored (hold it first).
func (in *ingester) exists(id ID) bool {
	_, err := in.st.be.StatObject(id)
	return err == nil
}

// storeWhole stores bytes [off, off+size) of r as a full object (unless one with the same
// identity exists) in one pass, and returns the identity.
func (w *Writer) storeWhole(r io.ReaderAt, off, size int64, width int) (ID, error) {
	fw, err := newFullWriter(w.s.be, w.s.codec, width, size)
	if err != nil {
		return ID{}, err
	}
	defer fw.abort()
	if err := copyRange(fw, r, off, size); err != nil {
		return ID{}, err
	}
	id, err := fw.finish(ID{}, ID{}, nil)
	if err != nil {
		return ID{}, err
	}
	w.hold(id)
	if w.in.existsToWrite(id) {
		return id, nil
	}
	return id, w.putFull(fw, id, width, size, ID{}, 0)
}

// writeFull stores src (whose identity the first pass found to be id) as a full object with
// an optional link delta from base.
func (w *Writer) writeFull(src io.ReaderAt, size int64, width int, id, base ID, link []byte) error {
	fw, err := newFullWriter(w.s.be, w.s.codec, width, size)
	if err != nil {
		return err
	}
	defer fw.abort()
	if err := copyRange(fw, src, 0, size); err != nil {
		return err
	}
	if got, err := fw.finish(id, base, link); err != nil {
		if !got.IsZero() && got != id {
			// The second read of the source saw other bytes than the first.
			return fmt.Errorf("%w: %w", err, ErrSourceChanged)
		}
		return err
	}
	if len(link) == 0 {
		base = ID{}
	}
	return w.putFull(fw, id, width, size, base, int64(len(link)))
}

func (w *Writer) putFull(fw *fullWriter, id ID, width int, size int64, base ID, linkLen int64) error {
	stored := fw.size()
	if err := fw.put(id); err != nil {
		return err
	}
	w.noteCreated(id, stored)
	w.s.objects.putMeta(id, objMeta{Kind: kindFull, Width: width, Base: base, ContentLen: size, FileSize: stored, DeltaLen: linkLen})
	return nil
}

// copyRange streams bytes [off, off+size) of r into dst.
func copyRange(dst io.Writer, r io.ReaderAt, off, size int64) error {
	buf := make([]byte, min(size, ingestChunk))
	for done := int64(0); done < size; {
		n := min(int64(len(buf)), size-done)
		if err := readAtFull(r, buf[:n], off+done); err != nil {
			return err
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return err
		}
		done += n
	}
	return nil
}

func (w *Writer) progressAdd(n int64) {
	done := w.doneB.Add(n)
	if w.progress != nil {
		// Tensor jobs run in parallel; the callback sees one call at a time.
		w.progressMu.Lock()
		w.progress(done, w.total)
		w.progressMu.Unlock()
	}
}
