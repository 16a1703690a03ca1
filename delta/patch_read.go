package delta

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
)

// Patch is an opened and validated one-file sparse patch. Safe for concurrent use.
type Patch struct {
	Header *Header
	Plan   PatchPlan // reconstructed from the metadata, tensors in data order
	// ID is the SHA-256 of the patch's header bytes (which carry every file's hashes): the
	// identity an interrupted apply records in its journal.
	ID [32]byte
	// Encoding is the index encoding: EncodingRaw, or EncodingGaps (patch_gaps.go), whose
	// streams OpenPatch reads once to check and index them.
	Encoding  string
	r         io.ReaderAt
	entries   map[string]Tensor    // by name, offsets relative to Header.DataStart()
	gaps      map[string]*gapTable // EncodingGaps: each tensor's stream, by tensor name
	markEvery int64                // EncodingGaps: pairs between two marks of a stream (cursorBatch)
}

// OpenPatch reads the header of the patch file r (size bytes) and checks that its metadata
// is present and consistent with its tensors. It does not read the data (Verify does), but
// for the gap streams of the leb128_gaps encoding, which it reads once and checks. An unknown format or version is refused with ErrUnsupportedVersion, anything else that is
// wrong with ErrMalformed.
func OpenPatch(r io.ReaderAt, size int64) (*Patch, error) {
	h, err := ReadHeader(r, size)
	if err != nil {
		return nil, fmt.Errorf("patch: %w", err)
	}
	raw := make([]byte, h.DataStart())
	if _, err := r.ReadAt(raw, 0); err != nil && !(err == io.EOF && int64(len(raw)) == size) {
		return nil, fmt.Errorf("patch: read header: %w", err)
	}
	p := &Patch{Header: h, ID: sha256.Sum256(raw), r: r, entries: make(map[string]Tensor, len(h.Tensors))}
	for _, t := range h.Tensors {
		p.entries[t.Name] = t
	}
	if err := p.readPlan(); err != nil {
		return nil, err
	}
	return p, nil
}

func malformedPatch(format string, args ...any) error {
	return fmt.Errorf("%w: patch: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// readPlan rebuilds the plan from the metadata and checks it against the tensors.
func (p *Patch) readPlan() error {
	meta := p.Header.Metadata
	get := func(key string) (string, error) { return metaString(meta, key) }
	enc, err := checkPatchFormat(meta)
	if err != nil {
		return err
	}
	p.Encoding = enc
	plan := &p.Plan
	if plan.ModelVersion, err = metaUint(meta, metaModelVersion); err != nil {
		return err
	}
	if plan.BaseVersion, err = metaUint(meta, metaBaseVersion); err != nil {
		return err
	}
	numChanged, err := metaUint(meta, metaNumChanged)
	if err != nil {
		return err
	}
	totalChanged, err := metaUint(meta, metaTotalChanged)
	if err != nil {
		return err
	}
	totalElements, err := metaUint(meta, metaTotalElements)
	if err != nil {
		return err
	}
	if totalElements > math.MaxInt64 {
		return malformedPatch("%q %d overflows int64", metaTotalElements, totalElements)
	}
	plan.TotalElements = int64(totalElements)
	var changedNames, fileNames, wholeNames []string
	for key, dst := range map[string]*[]string{metaChangedParams: &changedNames, metaFiles: &fileNames, metaWholeFiles: &wholeNames} {
		v, err := get(key)
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(v), dst); err != nil {
			return malformedPatch("%q is not a JSON list of strings: %v", key, err)
		}
	}
	if uint64(len(changedNames)) != numChanged {
		return malformedPatch("%q says %d but %q lists %d", metaNumChanged, numChanged, metaChangedParams, len(changedNames))
	}
	if err := p.readFiles(fileNames, wholeNames); err != nil {
		return err
	}
	headerNames, err := p.readHeaderFiles()
	if err != nil {
		return err
	}
	if err := p.readTensors(changedNames); err != nil {
		return err
	}
	if got := uint64(plan.TotalChanged()); got != totalChanged {
		return malformedPatch("%q says %d but the tensors carry %d", metaTotalChanged, totalChanged, got)
	}
	if plan.TotalElements < int64(totalChanged) {
		return malformedPatch("%d changed elements exceed the %d total elements", totalChanged, plan.TotalElements)
	}
	s, err := get(metaSparsity)
	if err != nil {
		return err
	}
	f, err := strconv.ParseFloat(s, 64)
	if want := sparsity(int64(totalChanged), plan.TotalElements); err != nil || math.Abs(f-want) > 1e-9 {
		return malformedPatch("%q is %q, want %v", metaSparsity, s, want)
	}
	// Every tensor of the file must be accounted for: nothing unexplained is carried.
	if want := 2*len(plan.Tensors) + len(wholeNames) + headerNames; len(p.Header.Tensors) != want {
		return malformedPatch("file holds %d tensors but its metadata accounts for %d", len(p.Header.Tensors), want)
	}
	if err := p.validate(); err != nil {
		return err
	}
	if p.Encoding == EncodingGaps {
		return p.indexGaps()
	}
	return nil
}

// readFiles fills Plan.Files from the files list and the per-file keys.
func (p *Patch) readFiles(fileNames, wholeNames []string) error {
	whole := make(map[string]bool, len(wholeNames))
	for _, w := range wholeNames {
		whole[w] = true
	}
	seen := make(map[string]bool, len(fileNames))
	for _, name := range fileNames {
		if seen[name] {
			return malformedPatch("file %q listed twice in %q", name, metaFiles)
		}
		seen[name] = true
		f := PatchFile{Name: name, Whole: whole[name]}
		if err := p.readDigests(&f); err != nil {
			return err
		}
		if f.Whole {
			t, ok := p.entries[WholeFilePrefix+name]
			if !ok || t.DType != DTypeU8 || len(t.Shape) != 1 {
				return malformedPatch("whole file %q has no 1-D U8 tensor %q", name, WholeFilePrefix+name)
			}
			f.WholeSize = t.Shape[0]
		}
		p.Plan.Files = append(p.Plan.Files, f)
	}
	for _, w := range wholeNames {
		if !seen[w] {
			return malformedPatch("whole file %q is not in %q", w, metaFiles)
		}
	}
	return nil
}

// readTensors fills Plan.Tensors from params:FILE and checks each tensor's two entries.
func (p *Patch) readTensors(changedNames []string) error {
	byName := make(map[string]PatchTensor)
	for _, f := range p.Plan.Files {
		if f.Whole {
			continue
		}
		js, ok := p.Header.Metadata[metaParamsPrefix+f.Name]
		if !ok {
			return malformedPatch("file %q has no %q", f.Name, metaParamsPrefix+f.Name)
		}
		var params map[string]patchParam
		if err := json.Unmarshal([]byte(js), &params); err != nil {
			return malformedPatch("%q is not a JSON object of {dtype, elements}: %v", metaParamsPrefix+f.Name, err)
		}
		digests := 0
		for name, prm := range params {
			if _, dup := byName[name]; dup {
				return malformedPatch("tensor %q listed under two files", name)
			}
			t := PatchTensor{File: f.Name, Name: name, DType: prm.DType, Elements: prm.Elements}
			if err := readTensorInfo(&t, prm); err != nil {
				return err
			}
			if prm.XXH3 != "" {
				digests++
			}
			byName[name] = t
		}
		// A writer records every tensor's digest or none (patches before the extension).
		if digests != 0 && digests != len(params) {
			return malformedPatch("%d of the %d tensors of file %q have an xxh3-128 digest", digests, len(params), f.Name)
		}
	}
	if len(byName) != len(changedNames) {
		return malformedPatch("%q lists %d tensors but the params of the files list %d", metaChangedParams, len(changedNames), len(byName))
	}
	for _, name := range changedNames {
		t, ok := byName[name]
		if !ok {
			return malformedPatch("changed tensor %q is not in any file's params", name)
		}
		if t.DType.Size() == 0 || t.Elements < 1 {
			return malformedPatch("tensor %q has dtype %q and %d elements", name, t.DType, t.Elements)
		}
		idx, okIdx := p.indexEntry(name)
		val, okVal := p.entries[name+valuesSuffix]
		if !okIdx || !okVal {
			return malformedPatch("changed tensor %q lacks its %s indices or %q", name, p.Encoding, name+valuesSuffix)
		}
		if p.Encoding == EncodingGaps {
			// The stream's length says nothing of the count: the values do, and indexGaps
			// checks that the stream holds exactly that many.
			if idx.DType != DTypeU8 || len(idx.Shape) != 1 || val.DType != t.DType || len(val.Shape) != 1 {
				return malformedPatch("%q is %s%v and %q %s%v, want a 1-D U8 and a 1-D %s", idx.Name, idx.DType, idx.Shape, val.Name, val.DType, val.Shape, t.DType)
			}
		} else {
			if idx.DType != t.IndexDType() || len(idx.Shape) != 1 {
				return malformedPatch("%q is %s%v, want a 1-D %s for a tensor of %d elements", idx.Name, idx.DType, idx.Shape, t.IndexDType(), t.Elements)
			}
			if val.DType != t.DType || len(val.Shape) != 1 || val.Shape[0] != idx.Shape[0] {
				return malformedPatch("%q is %s%v, want a 1-D %s of %d values", val.Name, val.DType, val.Shape, t.DType, idx.Shape[0])
			}
		}
		t.Changed = val.Shape[0]
		if t.Changed < 1 || t.Changed > t.Elements {
			return malformedPatch("tensor %q has %d changes for %d elements", name, t.Changed, t.Elements)
		}
		p.Plan.Tensors = append(p.Plan.Tensors, t)
		delete(byName, name) // a name listed twice in changed_params is then not found
	}
	// Data order, so the plan re-encodes to the same bytes.
	slices.SortStableFunc(p.Plan.Tensors, func(a, b PatchTensor) int {
		ia, _ := p.indexEntry(a.Name)
		ib, _ := p.indexEntry(b.Name)
		return cmpInt64(ia.Begin, ib.Begin)
	})
	return nil
}

// validate applies the writer's own rules to the rebuilt plan, so a patch that opens is one
// the writer could have produced.
func (p *Patch) validate() error {
	if err := p.Plan.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return nil
}

// File returns the plan entry of the file called name.
func (p *Patch) File(name string) (PatchFile, bool) { return p.Plan.file(name) }

// TensorsOf returns the changed tensors of file name, in data order.
func (p *Patch) TensorsOf(name string) []PatchTensor {
	var out []PatchTensor
	for _, t := range p.Plan.Tensors {
		if t.File == name {
			out = append(out, t)
		}
	}
	return out
}

// WholeFile returns a reader of the new bytes of a file carried whole.
func (p *Patch) WholeFile(name string) (*io.SectionReader, error) {
	f, ok := p.Plan.file(name)
	if !ok || !f.Whole {
		return nil, fmt.Errorf("patch carries no whole file %q", name)
	}
	t := p.entries[WholeFilePrefix+name]
	return io.NewSectionReader(p.r, p.Header.DataStart()+t.Begin, t.End-t.Begin), nil
}

// Verify reads every tensor's indices and checks they ascend strictly and stay inside the
// tensor. Errors wrap ErrMalformed.
func (p *Patch) Verify() error {
	for _, t := range p.Plan.Tensors {
		c := p.newCursor(t)
		for {
			_, _, ok, err := c.next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
		}
	}
	return nil
}

// patchCursor reads one tensor's (index, value) pairs in order, a batch at a time, checking
// each index as it goes.
type patchCursor struct {
	p       *Patch
	t       PatchTensor
	width   int
	idxSize int
	idxOff  int64 // file offset of the next unread index
	valOff  int64
	left    int64 // pairs not yet read into the batch
	idx     []byte
	val     []byte
	pos     int // next pair in the batch
	n       int // pairs in the batch
	last    int64
	gaps    *gapStream // EncodingGaps: the stream fill decodes idx from
	skip    int64      // EncodingGaps: pairs to decode past before the first
}

const cursorBatch = 1 << 16 // pairs per read

func (p *Patch) newCursor(t PatchTensor) *patchCursor {
	return p.newCursorRange(t, 0, t.Changed)
}

// newCursorRange reads only pairs [from, to) of the tensor (0 <= from <= to <= t.Changed).
// Its first index is checked against the tensor's size but not against the pair before it.
func (p *Patch) newCursorRange(t PatchTensor, from, to int64) *patchCursor {
	idx, _ := p.indexEntry(t.Name)
	val := p.entries[t.Name+valuesSuffix]
	c := &patchCursor{p: p, t: t, width: t.DType.Size(), idxSize: t.IndexDType().Size(), left: to - from, last: -1}
	c.idxOff = p.Header.DataStart() + idx.Begin + from*int64(c.idxSize)
	c.valOff = p.Header.DataStart() + val.Begin + from*int64(c.width)
	if p.Encoding == EncodingGaps && c.left > 0 {
		p.gapCursor(c, from)
	}
	return c
}

// next returns the next changed element index and its new value and moves past them; ok is
// false at the end. The value slice is valid until the cursor next reads from the patch.
func (c *patchCursor) next() (index int64, value []byte, ok bool, err error) {
	index, value, ok, err = c.cur()
	if ok {
		c.advance()
	}
	return index, value, ok, err
}

// cur returns the current pair without moving past it, checking its index.
func (c *patchCursor) cur() (index int64, value []byte, ok bool, err error) {
	if c.pos == c.n {
		if c.left == 0 {
			return 0, nil, false, nil
		}
		if err := c.fill(); err != nil {
			return 0, nil, false, err
		}
	}
	if index, err = c.index(); err != nil {
		return 0, nil, false, err
	}
	return index, c.val[c.pos*c.width : (c.pos+1)*c.width], true, nil
}

// index decodes the index of the batch's current pair and checks that it ascends and lies
// inside the tensor.
func (c *patchCursor) index() (int64, error) {
	var index int64
	if c.idxSize == 8 {
		index = int64(binary.LittleEndian.Uint64(c.idx[c.pos*8:]))
	} else {
		index = int64(int32(binary.LittleEndian.Uint32(c.idx[c.pos*4:])))
	}
	if index <= c.last || index >= c.t.Elements {
		return 0, malformedPatch("tensor %q: index %d after %d is not ascending within %d elements", c.t.Name, index, c.last, c.t.Elements)
	}
	return index, nil
}

// advance moves past the pair cur returned.
func (c *patchCursor) advance() {
	if c.idxSize == 8 {
		c.last = int64(binary.LittleEndian.Uint64(c.idx[c.pos*8:]))
	} else {
		c.last = int64(int32(binary.LittleEndian.Uint32(c.idx[c.pos*4:])))
	}
	c.pos++
}

func (c *patchCursor) fill() error {
	n := int(min(c.left, cursorBatch))
	c.idx = grow(c.idx, n*c.idxSize)
	c.val = grow(c.val, n*c.width)
	if c.gaps != nil {
		if err := c.fillGaps(n); err != nil {
			return err
		}
	} else if err := readFull(c.p.r, c.idx, c.idxOff); err != nil {
		return fmt.Errorf("patch: read indices of %q: %w", c.t.Name, err)
	}
	if err := readFull(c.p.r, c.val, c.valOff); err != nil {
		return fmt.Errorf("patch: read values of %q: %w", c.t.Name, err)
	}
	c.idxOff += int64(len(c.idx))
	c.valOff += int64(len(c.val))
	c.left -= int64(n)
	c.pos, c.n = 0, n
	return nil
}

// reuse takes the batch buffers of a cursor that is done with them.
func (c *patchCursor) reuse(done *patchCursor) {
	c.idx, c.val = done.idx[:0], done.val[:0]
	done.idx, done.val, done.pos, done.n = nil, nil, 0, 0
	if c.gaps != nil && done.gaps != nil && c.gaps.buf == nil {
		c.gaps.buf, done.gaps.buf = done.gaps.buf[:0], nil
	}
}

// grow returns b resized to n bytes, reusing its storage when it can.
func grow(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n)
}

// readFull reads len(b) bytes at off, accepting io.EOF with a full read.
func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
