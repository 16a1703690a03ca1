package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sync"

	"github.com/weightfs/weightfs/delta"
)

// A patch in: a version that comes as the one-file sparse patch from the latest version
// (docs/format.md Part III §2), as a trainer that diffs its own weights writes it into
// MNT/patches/. The patch is checked whole before anything is stored, then each file of the
// new version is read as the base's bytes with the patch laid over them (delta.ChunkPatcher:
// the apply's own cursors and checks) and stored by the ingest's own paths: a changed tensor
// by ingestTensor (a delta against the same tensor of the latest version, or an anchor, as
// any ingest would), an unchanged tensor or file by reference to its object. No full copy of
// the version is written anywhere, and the manifest and objects are those a full ingest of
// the same bytes stores (TestCommitPatchEqualsIngest). Everything goes through a Writer, so a
// refusal or a crash at any point leaves no version, and the objects already put are swept.

// CommitPatch seals version v made from the latest sealed version and the patch in r (size
// bytes). v is the version the patch's name gives (0: its model_version); they must agree.
// A patch that cannot make that version is refused with an error wrapping ErrBadPatch that
// names the file and the tensor: its base_version is not the latest version, a file's
// base_sha256 or base_xxh3 is not the latest version's file, it names a file or tensor the
// base lacks or gives another dtype, element count or shape, it is truncated or malformed, an
// index does not ascend or lies outside its tensor, or the result is not its result_sha256,
// its result_xxh3 or a changed tensor's "xxh3" (every claim it makes is checked; a patch may
// record a file's xxh3-128 and no SHA-256, docs/format.md Part III §2). Damage of the store
// is ErrCorrupt, as on any read. Nothing is sealed on an error.
//
// What a claim is checked against where the fast path does not hash the bytes again: a
// changed tensor's "xxh3" against the xxh3-128 the pass took of its bytes for its manifest
// entry; base_xxh3 against the digest the last patch's pass (or a render) found for the same
// base file, by its SHA-256 (renders.knownFileXXH3), else the base file's bytes as read. A
// materialized copy deferred at the latest version (the base in memory holds it) stays
// deferred: the bases come from memory, or through the store's read path.
func (s *Store) CommitPatch(r io.ReaderAt, size int64, v uint64) (VersionInfo, error) {
	if err := s.checkOpen(); err != nil {
		return VersionInfo{}, err
	}
	p, base, err := s.ingest.checkPatch(r, size, v)
	if err != nil {
		return VersionInfo{}, err
	}
	v = p.Plan.ModelVersion
	return sealDeltaIn(s, "patch", v, p.Plan.BaseVersion, func(w *Writer) (VersionInfo, error) {
		return w.applyPatch(p, base)
	})
}

// sealDeltaIn makes version v through a Writer with apply, which stores the version's files
// (from a delta against version from) and seals it; when apply fails the Writer is aborted, its
// objects swept, and nothing is sealed. what names the kind of input in errors. CommitPatch and
// CommitSlimeDelta end here.
func sealDeltaIn(s *Store, what string, v, from uint64, apply func(*Writer) (VersionInfo, error)) (VersionInfo, error) {
	w, err := s.NewVersion(v)
	if err != nil {
		return VersionInfo{}, fmt.Errorf("%s to version %d: %w", what, v, err)
	}
	info, err := apply(w)
	if err != nil {
		w.Abort()
		return VersionInfo{}, fmt.Errorf("%s %d -> %d: %w", what, from, v, err)
	}
	return info, nil
}

// badPatch marks an error of the patch's own (not the store's) as ErrBadPatch.
func badPatch(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadPatch, fmt.Sprintf(format, args...))
}

// patchInputError marks the delta package's verdicts on the patch's bytes as ErrBadPatch;
// anything else (an I/O error reading it) passes as it is.
func patchInputError(err error) error {
	if errors.Is(err, delta.ErrMalformed) || errors.Is(err, delta.ErrUnsupportedVersion) || errors.Is(err, delta.ErrBaseMismatch) {
		return fmt.Errorf("%w: %w", ErrBadPatch, err)
	}
	return err
}

// checkPatch (the ingest part's) reads the patch and checks it against the latest version, all of it, before a
// writer opens: the format and every index (delta.OpenPatch, Patch.Verify), the versions,
// every file's base identity, and every changed tensor against the base's header.
func (in *ingester) checkPatch(r io.ReaderAt, size int64, v uint64) (*delta.Patch, *version, error) {
	s := in.st
	p, err := delta.OpenPatch(r, size)
	if err != nil {
		return nil, nil, patchInputError(fmt.Errorf("read the patch: %w", err))
	}
	if v != 0 && p.Plan.ModelVersion != v {
		return nil, nil, badPatch("its model_version is %d, its name says %d", p.Plan.ModelVersion, v)
	}
	latest, ok := s.Latest()
	if !ok {
		return nil, nil, badPatch("the store has no version to apply it to (write the first version whole)")
	}
	if p.Plan.BaseVersion != latest {
		return nil, nil, badPatch("its base_version is %d, the latest version is %d", p.Plan.BaseVersion, latest)
	}
	if err := p.Verify(); err != nil {
		return nil, nil, patchInputError(err)
	}
	base, err := s.versions.sealedVersion(latest)
	if err != nil {
		return nil, nil, err
	}
	for _, pf := range p.Plan.Files {
		bf := base.files[pf.Name]
		switch {
		case pf.New() && bf != nil:
			return nil, nil, badPatch("file %s: the patch adds it, version %d has it", pf.Name, latest)
		case pf.New():
			if err := checkPath(pf.Name); err != nil {
				return nil, nil, badPatch("file %s: %v", pf.Name, err)
			}
		case bf == nil:
			return nil, nil, badPatch("file %s: version %d has no such file", pf.Name, latest)
		case !pf.XXH3Only && ID(pf.BaseSHA256) != bf.SHA256: // base_xxh3 is checked as the file is read
			return nil, nil, badPatch("file %s: base_sha256 %x is not version %d's file (%s)", pf.Name, pf.BaseSHA256, latest, bf.SHA256)
		case !pf.Whole && bf.Kind != kindSafetensors:
			return nil, nil, badPatch("file %s: patched by tensor, but version %d's file is not safetensors", pf.Name, latest)
		}
	}
	return p, base, nil
}

// applyPatch adds every file of the new version to w and seals it.
func (w *Writer) applyPatch(p *delta.Patch, base *version) (VersionInfo, error) {
	if err := w.startFrom(base, true); err != nil {
		return VersionInfo{}, err
	}
	changed := map[string]bool{}
	var patched []delta.PatchFile
	for _, pf := range p.Plan.Files {
		changed[pf.Name] = true
		if !pf.Whole {
			patched = append(patched, pf)
			continue
		}
		if err := w.addWholeFromPatch(p, pf, base.m.Version, base.files[pf.Name]); err != nil {
			return VersionInfo{}, fmt.Errorf("file %s: %w", pf.Name, err)
		}
	}
	if err := w.addPatchedFiles(p, patched, base); err != nil {
		return VersionInfo{}, err
	}
	if err := w.addUnchangedFiles(base, changed); err != nil {
		return VersionInfo{}, err
	}
	return w.Seal()
}

// startFrom begins a version made from base and changes laid over it (a patch, a slime
// delta): the materialized copy at base, and base's directories. deferOK (a patch) leaves a
// copy deferred at base where it is (copy_defer.go): the base in memory holds base's
// tensors, the patch's pass reads them from there (a tensor it does not hold through the
// store's read path), and the copy is not brought forward inside the seal.
func (w *Writer) startFrom(base *version, deferOK bool) error {
	ensure := w.s.mat.ensure
	if deferOK {
		ensure = w.s.mat.ensureForWriter
	}
	if err := ensure(); err != nil {
		return err
	}
	for _, d := range base.m.Dirs {
		if err := w.AddDir(d.Path, fs.FileMode(d.Mode)); err != nil {
			return err
		}
	}
	return nil
}

// addUnchangedFiles adds every file of base that changed does not name as it is, its
// tensors kept for the next version's diffs.
func (w *Writer) addUnchangedFiles(base *version, changed map[string]bool) error {
	for i := range base.m.Files {
		if bf := &base.m.Files[i]; !changed[bf.Path] {
			if err := w.addEntry(w.unchangedEntry(bf)); err != nil {
				return err
			}
			for _, t := range bf.Tensors { // kept for the next version's diffs
				w.carryUnchanged(base.m.Version, t.ID, t.End-t.Begin)
			}
		}
	}
	return nil
}

// unchangedEntry is the entry a full ingest makes of a file equal to bf, the latest
// version's: the same objects, each tensor diffed against itself with nothing changed.
func (w *Writer) unchangedEntry(bf *manifestFile) *manifestFile {
	e := *bf
	e.Tensors = slices.Clone(bf.Tensors)
	if e.Kind == kindBlob {
		w.hold(e.ID)
		return &e
	}
	w.hold(e.Header)
	for i := range e.Tensors {
		t := &e.Tensors[i]
		t.Base, t.Changed = t.ID, 0
		w.hold(t.ID)
	}
	return &e
}

// addEntry adds a file whose objects the writer holds.
func (w *Writer) addEntry(e *manifestFile) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return fmt.Errorf("version %d: %w", w.v, ErrWriterDone)
	}
	w.files[e.Path] = e
	w.markStreamedLocked(e.Path, false)
	return nil
}

// fileSHA256 is the identity of the file added at p ("" if none).
func (w *Writer) fileSHA256(p string) (ID, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.files[p]; e != nil {
		return e.SHA256, true
	}
	return ID{}, false
}

// addWholeFromPatch ingests a file the patch carries whole, like any file written whole, and
// checks its claims: result_sha256 (unless it records xxh3-128 only), and the xxh3-128.
func (w *Writer) addWholeFromPatch(p *delta.Patch, pf delta.PatchFile, baseV uint64, bf *manifestFile) error {
	r, err := p.WholeFile(pf.Name)
	if err != nil {
		return patchInputError(err)
	}
	mode := fs.FileMode(0o644) // a file new in the patch: the mode a trainer's save gives
	if bf != nil {
		mode = fs.FileMode(bf.Mode)
	}
	if err := w.AddFile(pf.Name, r, pf.WholeSize, mode); err != nil {
		return err
	}
	if sum, _ := w.fileSHA256(pf.Name); sum != ID(pf.ResultSHA256) && !pf.XXH3Only {
		return badPatch("the patch makes a file of SHA-256 %s, its result_sha256 is %x", sum, pf.ResultSHA256)
	}
	return w.checkWholeXXH3(pf, r, pf.WholeSize, baseV, bf)
}

// addPatchedFile ingests a safetensors file the patch changes by tensor: the base file of
// version baseV with the patch laid over it.
func (w *Writer) addPatchedFile(p *delta.Patch, pf delta.PatchFile, baseV uint64, bf *manifestFile) error {
	src, err := w.s.OpenFile(baseV, bf.Path)
	if err != nil {
		return err
	}
	defer src.Close()
	prefix := make([]byte, bf.HeaderLen)
	if err := readAtFull(src, prefix, 0); err != nil {
		return fmt.Errorf("read the base's header: %w", err)
	}
	prefix, hdr, err := patchHeader(pf, bf, prefix)
	if err != nil {
		return err
	}
	cp, err := p.NewChunkPatcher(pf.Name, hdr)
	if err != nil {
		return patchInputError(err)
	}
	entry := &manifestFile{Path: bf.Path, Mode: bf.Mode, Size: bf.Size, Kind: kindSafetensors, HeaderLen: bf.HeaderLen}
	if pf.NewHeader == nil {
		entry.Header = bf.Header
		w.hold(entry.Header)
	} else if entry.Header, err = w.storeWhole(bytes.NewReader(prefix), 0, entry.HeaderLen, 1); err != nil {
		return fmt.Errorf("store header: %w", err)
	}
	var copySums sumWriter
	var tee io.Writer = &copySums
	x := newXXH3Claims(p, pf, hdr)
	var hashed io.ReaderAt
	if x != nil { // the hash pass reads both files in order: the base's bytes to x too
		tee = io.MultiWriter(&copySums, x)
		hashed = &patchedFile{base: src, prefix: prefix, size: bf.Size, cp: cp.Fork(), baseTee: x.writeBase}
	}
	err = w.storeOverlaid(entry, bf, overlaid{hdr: hdr, tee: tee, hashed: hashed,
		open:    func() io.ReaderAt { return &patchedFile{base: src, prefix: prefix, size: bf.Size, cp: cp.Fork()} },
		changes: func(_ int, t delta.Tensor) bool { return cp.Changes(t.Name) },
	})
	if err != nil {
		return err
	}
	if err := checkPatchedFile(pf, entry.SHA256, x); err != nil {
		return err
	}
	x.note(w.s.renders, entry.SHA256, bf.SHA256)
	w.s.mat.contentChecks().noteSums(keyOf(entry), copySums.sums())
	return w.addEntry(entry)
}

// overlaid is a safetensors file of the new version made of its base file's bytes with
// changes laid over them (a patch's, a slime delta's).
type overlaid struct {
	hdr     *delta.Header                    // the new file's
	open    func() io.ReaderAt               // the new file's bytes: one reader per goroutine
	changes func(i int, t delta.Tensor) bool // whether the i-th tensor changes
	tee     io.Writer                        // takes the new file's bytes in order (the copy's sums)
	hashed  io.ReaderAt                      // what the hash pass reads (nil: a reader of open)
}

// storeOverlaid fills entry (the new file of base file bf, its header stored and held) with
// f's tensors and SHA-256: the changed tensors stored by the ingest's tensor jobs from the
// overlaid bytes, the others by reference to the base's objects, while one pass hashes the
// file and its pieces, as ingestFile does: each piece must be the object the entry names.
func (w *Writer) storeOverlaid(entry, bf *manifestFile, f overlaid) error {
	w.noteFileStart()
	ends := []int64{f.hdr.DataStart()}
	for _, t := range f.hdr.Tensors {
		ends = append(ends, f.hdr.DataStart()+t.End)
	}
	var sums []ID
	var shaErr error
	var shaDone sync.WaitGroup
	shaDone.Add(1)
	r := f.hashed
	if r == nil {
		r = f.open()
	}
	go func() {
		defer shaDone.Done()
		entry.SHA256, sums, shaErr = hashPieces(r, ends, f.tee, w.in.hashInOnePass)
	}()
	err := w.overlaidTensors(entry, bf, f)
	shaDone.Wait()
	if err == nil {
		err = shaErr
	}
	if err != nil {
		return err
	}
	if sums[0] != entry.Header {
		return fmt.Errorf("its header was stored as %s but reads as %s: %w", entry.Header, sums[0], ErrCorrupt)
	}
	for i := range entry.Tensors {
		if t := &entry.Tensors[i]; sums[i+1] != t.ID {
			return fmt.Errorf("tensor %s was stored as %s but reads as %s: %w", t.Name, t.ID, sums[i+1], ErrCorrupt)
		}
	}
	return nil
}

// overlaidTensors fills entry's tensors from f: the changed ones by the ingest's tensor jobs,
// the others by reference to the base's objects. Every tensor of the header must be where
// the base's manifest holds it (the changes keep the base's tensors in place).
func (w *Writer) overlaidTensors(entry, bf *manifestFile, f overlaid) error {
	entry.Tensors = make([]manifestTensor, len(f.hdr.Tensors))
	errs := make([]error, len(f.hdr.Tensors))
	var wg sync.WaitGroup
	for i, t := range f.hdr.Tensors {
		entry.Tensors[i] = manifestTensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: t.Begin, End: t.End}
		bt := baseTensorAt(bf, i, t)
		if bt == nil {
			errs[i] = fmt.Errorf("tensor %s: the base's manifest does not hold it where its header does: %w", t.Name, ErrCorrupt)
			continue
		}
		if !f.changes(i, t) {
			et := &entry.Tensors[i]
			et.ID, et.Base, et.Changed, et.XXH3 = bt.ID, bt.ID, 0, bt.XXH3
			w.hold(bt.ID)
			continue
		}
		w.in.workers <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-w.in.workers; wg.Done() }()
			if errs[i] = w.ingestTensor(entry.Path, f.open(), entry.HeaderLen, &entry.Tensors[i]); errs[i] != nil {
				errs[i] = fmt.Errorf("tensor %s: %w", t.Name, errs[i])
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// baseTensorAt finds tensor t (the i-th of the file's header) in the base's entry, where the
// manifest, written from the same header, keeps it.
func baseTensorAt(bf *manifestFile, i int, t delta.Tensor) *manifestTensor {
	if i < len(bf.Tensors) && bf.Tensors[i].Name == t.Name {
		bt := &bf.Tensors[i]
		if bt.DType == t.DType && slices.Equal(bt.Shape, t.Shape) && bt.Begin == t.Begin && bt.End == t.End {
			return bt
		}
	}
	return nil
}

// samePlaces reports whether two headers hold the same tensors at the same offsets.
func samePlaces(a, b *delta.Header) bool {
	if a.DataStart() != b.DataStart() || len(a.Tensors) != len(b.Tensors) {
		return false
	}
	for i, t := range a.Tensors {
		u := b.Tensors[i]
		if t.Name != u.Name || t.DType != u.DType || !slices.Equal(t.Shape, u.Shape) || t.Begin != u.Begin || t.End != u.End {
			return false
		}
	}
	return true
}

// readBaseUnder is the start of a ReadAt of a file of size bytes made from base with changes
// laid over it (patchedFile, slimeFile): b cut at the end of the file (atEnd then io.EOF), and
// the base's bytes read into it. An empty b with a nil error is a read at or past the end
// (io.EOF in err).
func readBaseUnder(base io.ReaderAt, size int64, b []byte, off int64) (_ []byte, atEnd, err error) {
	if off < 0 {
		return nil, nil, fmt.Errorf("read at %d: negative offset", off)
	}
	if off >= size {
		return nil, nil, io.EOF
	}
	if rest := size - off; int64(len(b)) > rest {
		b, atEnd = b[:rest], io.EOF
	}
	if err := readAtFull(base, b, off); err != nil {
		return nil, nil, err
	}
	return b, atEnd, nil
}

// patchedFile reads a file of the new version: the base's bytes (through the store's checked
// read path), the result's header over its first bytes, and the patch's changes over its
// data. Cheapest read in order; one reader per goroutine (its patcher has a position).
type patchedFile struct {
	base   io.ReaderAt
	prefix []byte // the result's bytes [0, data start)
	size   int64
	cp     *delta.ChunkPatcher
	// baseTee, when set, takes the base's bytes read before anything is laid over them (the
	// hash pass's reader: its reads ascend from 0).
	baseTee func([]byte)
}

func (f *patchedFile) ReadAt(b []byte, off int64) (int, error) {
	b, atEnd, err := readBaseUnder(f.base, f.size, b, off)
	if err != nil || len(b) == 0 {
		return 0, err
	}
	if f.baseTee != nil {
		f.baseTee(b)
	}
	hl := int64(len(f.prefix))
	if off < hl {
		copy(b, f.prefix[off:])
	}
	if end := off + int64(len(b)); end > hl {
		from := max(off, hl)
		if err := f.cp.Patch(b[from-off:], from-hl); err != nil {
			return 0, patchInputError(err)
		}
	}
	return len(b), atEnd
}
