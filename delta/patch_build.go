package delta

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"slices"

	"github.com/zeebo/xxh3"
)

// PatchSource is one file of the result version and, when it existed, the same file of the
// base version.
type PatchSource struct {
	Name       string      // slash-separated path relative to the version root
	Base       io.ReaderAt // nil: the file is new in the result
	BaseSize   int64
	Result     io.ReaderAt
	ResultSize int64
}

// buildChunk is the read size of BuildPatchWith; a multiple of every element width.
const buildChunk = 4 << 20

// PatchBuildOptions are the optional parts of a patch BuildPatchWith writes.
type PatchBuildOptions struct {
	// Shapes records each changed tensor's full shape in its params entry (the optional shape
	// extension, docs/format.md Part III §2). Off by default: the store's PatchSize, which
	// must give the size of the patch it serves without building it, does not count shapes.
	Shapes bool
}

// BuildPatchWith diffs every file of the result version against the base and writes the
// patch to w, reading each file twice (once to plan, once to write) and holding only a few
// chunks in memory. A safetensors file whose header bytes and size are unchanged is patched
// sparsely; any other changed file is carried whole. Files equal in both versions are left
// out, but their tensors count in total_elements, so pass every file of the result version.
//
// Every changed tensor's params entry records the xxh3-128 of its new raw bytes (the optional
// per-tensor digest, docs/format.md Part III §2); opts.Shapes records shapes too.
func BuildPatchWith(w io.WriterAt, modelVersion, baseVersion uint64, files []PatchSource, opts PatchBuildOptions) (PatchPlan, error) {
	plan := PatchPlan{ModelVersion: modelVersion, BaseVersion: baseVersion}
	sparse := make(map[string]*Header)
	for _, src := range files {
		f, tensors, h, elements, err := planFile(src, opts)
		if err != nil {
			return plan, fmt.Errorf("plan patch of %s: %w", src.Name, err)
		}
		plan.TotalElements += elements
		if f == nil {
			continue
		}
		plan.Files = append(plan.Files, *f)
		plan.Tensors = append(plan.Tensors, tensors...)
		if !f.Whole {
			sparse[src.Name] = h
		}
	}
	pw, err := NewPatchWriter(w, plan)
	if err != nil {
		return plan, err
	}
	base, cur := make([]byte, buildChunk), make([]byte, buildChunk)
	var idx []uint32
	var vals []byte
	for _, src := range files {
		h, ok := sparse[src.Name]
		if !ok {
			continue
		}
		byName := tensorsByName(h)
		for _, t := range plan.Tensors {
			if t.File != src.Name {
				continue
			}
			th := byName[t.Name]
			err := forTensorChunks(src, h, th, base, cur, func(first int64, b, c []byte) error {
				idx, vals = diffElements(b, c, t.DType.Size(), idx[:0], vals[:0])
				return pw.Add(first, idx, vals)
			})
			if err != nil {
				return plan, fmt.Errorf("write patch of %s: %w", src.Name, err)
			}
		}
	}
	for _, f := range plan.Files {
		if !f.Whole {
			continue
		}
		src := sourceByName(files, f.Name)
		for off := int64(0); off < f.WholeSize; off += buildChunk {
			chunk := cur[:min(buildChunk, f.WholeSize-off)]
			if err := readFull(src.Result, chunk, off); err != nil {
				return plan, fmt.Errorf("read %s: %w", f.Name, err)
			}
			if err := pw.AddWhole(chunk); err != nil {
				return plan, err
			}
		}
	}
	return plan, pw.Close()
}

// tensorsByName indexes a header's tensors (models have tens of thousands of them).
func tensorsByName(h *Header) map[string]Tensor {
	m := make(map[string]Tensor, len(h.Tensors))
	for _, t := range h.Tensors {
		m[t.Name] = t
	}
	return m
}

func sourceByName(files []PatchSource, name string) PatchSource {
	for _, s := range files {
		if s.Name == name {
			return s
		}
	}
	return PatchSource{}
}

// planFile hashes one file pair and counts its changed elements. It returns a nil file when
// nothing changed, and the result's tensor elements either way.
func planFile(src PatchSource, opts PatchBuildOptions) (f *PatchFile, tensors []PatchTensor, h *Header, elements int64, err error) {
	rh, rerr := ReadHeader(src.Result, src.ResultSize)
	if rerr == nil {
		for _, t := range rh.Tensors {
			elements += t.Elements()
		}
	}
	var bh *Header
	if src.Base != nil && rerr == nil && src.BaseSize == src.ResultSize {
		if bh, err = ReadHeader(src.Base, src.BaseSize); err != nil {
			bh = nil
		}
	}
	var basePrefix, newHeader []byte
	if bh != nil {
		// Patched sparsely when the header bytes are the same, or when only the header's
		// bytes changed, not its length nor any tensor's name, dtype, shape or place (a
		// header-only change: the patch carries the new header, not the whole file).
		same, b, r, err := samePrefix(src, rh.DataStart())
		switch {
		case err != nil:
			return nil, nil, nil, 0, err
		case same:
		case bh.DataStart() == rh.DataStart() && sameTensorPlaces(bh, rh):
			basePrefix, newHeader = b, r
		default:
			bh = nil
		}
	}
	if bh == nil {
		f, err := planWholeFile(src)
		if err != nil {
			return nil, nil, nil, 0, err
		}
		return f, nil, nil, elements, nil
	}
	f, tensors, err = planSparseFile(src, rh, basePrefix, newHeader, opts)
	switch {
	case err != nil:
		return nil, nil, nil, 0, err
	case f == nil:
		return nil, nil, nil, elements, nil
	}
	return f, tensors, rh, elements, nil
}

// planWholeFile plans a file carried whole if it changed: it hashes both as they are. It
// returns a nil file when nothing changed.
func planWholeFile(src PatchSource) (*PatchFile, error) {
	pf := PatchFile{Name: src.Name, HasXXH3: true}
	result, err := hashReader(src.Result, src.ResultSize)
	if err != nil {
		return nil, err
	}
	if src.Base != nil {
		base, err := hashReader(src.Base, src.BaseSize)
		if err != nil {
			return nil, err
		}
		if base.sha256 == result.sha256 {
			return nil, nil
		}
		pf.BaseSHA256, pf.BaseXXH3 = base.sha256, base.xxh3
	}
	pf.ResultSHA256, pf.ResultXXH3, pf.Whole, pf.WholeSize = result.sha256, result.xxh3, true, src.ResultSize
	return &pf, nil
}

// planSparseFile plans a file patched sparsely (the tensors in the same places, rh the
// result's header): it hashes both while counting changed elements tensor by tensor. A
// header-only change has the base's header bytes in basePrefix and the new ones in
// newHeader. It returns a nil file when nothing changed.
func planSparseFile(src PatchSource, rh *Header, basePrefix, newHeader []byte, opts PatchBuildOptions) (*PatchFile, []PatchTensor, error) {
	pf := PatchFile{Name: src.Name, HasXXH3: true}
	prefix := make([]byte, rh.DataStart())
	if err := readFull(src.Result, prefix, 0); err != nil {
		return nil, nil, err
	}
	hb, hr := newFileHasher(), newFileHasher()
	if basePrefix != nil {
		hb.Write(basePrefix)
	} else {
		hb.Write(prefix)
	}
	hr.Write(prefix)
	pf.NewHeader = newHeader
	base, cur := make([]byte, buildChunk), make([]byte, buildChunk)
	tensorHash := xxh3.New()
	var tensors []PatchTensor
	for _, t := range rh.Tensors {
		changed := int64(0)
		tensorHash.Reset()
		err := forTensorChunks(src, rh, t, base, cur, func(_ int64, b, c []byte) error {
			// The base's hashes on a second core: the two SHA-256 streams are most of the
			// pass, and neither can be split.
			done := make(chan struct{})
			go func() { hb.Write(b); close(done) }()
			hr.Write(c)
			tensorHash.Write(c)
			changed += countChanged(b, c, t.DType.Size())
			<-done
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		if changed > 0 {
			pt := PatchTensor{File: src.Name, Name: t.Name, DType: t.DType, Elements: t.Elements(), Changed: changed,
				ResultXXH3: tensorHash.Sum128().Bytes()}
			if opts.Shapes {
				pt.Shape = append([]int64{}, t.Shape...)
			}
			tensors = append(tensors, pt)
		}
	}
	if len(tensors) == 0 && newHeader == nil {
		return nil, nil, nil
	}
	before, after := hb.digests(), hr.digests()
	pf.BaseSHA256, pf.BaseXXH3 = before.sha256, before.xxh3
	pf.ResultSHA256, pf.ResultXXH3 = after.sha256, after.xxh3
	return &pf, tensors, nil
}

// samePrefix reports whether base and result have the same first n bytes, and returns both.
func samePrefix(src PatchSource, n int64) (same bool, base, result []byte, err error) {
	a, b := make([]byte, n), make([]byte, n)
	if err := readFull(src.Base, a, 0); err != nil {
		return false, nil, nil, err
	}
	if err := readFull(src.Result, b, 0); err != nil {
		return false, nil, nil, err
	}
	return bytes.Equal(a, b), a, b, nil
}

// sameTensorPlaces reports whether two headers hold the same tensors (names, dtypes, shapes)
// at the same data offsets, in whatever order their JSON lists them.
func sameTensorPlaces(a, b *Header) bool {
	if len(a.Tensors) != len(b.Tensors) {
		return false
	}
	byName := tensorsByName(a)
	for _, t := range b.Tensors {
		o, ok := byName[t.Name]
		if !ok || o.DType != t.DType || o.Begin != t.Begin || o.End != t.End || !slices.Equal(o.Shape, t.Shape) {
			return false
		}
	}
	return true
}

// forTensorChunks calls fn with aligned chunks of tensor t from base and result; first is
// the element index of the chunk's start.
func forTensorChunks(src PatchSource, h *Header, t Tensor, base, cur []byte, fn func(first int64, b, c []byte) error) error {
	width := int64(t.DType.Size())
	for off := int64(0); off < t.ByteLen(); off += buildChunk {
		n := min(buildChunk, t.ByteLen()-off)
		at := h.DataStart() + t.Begin + off
		if err := readFull(src.Base, base[:n], at); err != nil {
			return fmt.Errorf("read base of %q: %w", t.Name, err)
		}
		if err := readFull(src.Result, cur[:n], at); err != nil {
			return fmt.Errorf("read result of %q: %w", t.Name, err)
		}
		if err := fn(off/width, base[:n], cur[:n]); err != nil {
			return err
		}
	}
	return nil
}

// fileDigests are the two whole-file hashes a patch records per file.
type fileDigests struct {
	sha256 [32]byte
	xxh3   [16]byte
}

// fileHasher computes SHA-256 and xxh3-128 of one stream.
type fileHasher struct {
	sha hash.Hash
	xxh *xxh3.Hasher
}

func newFileHasher() fileHasher { return fileHasher{sha: sha256.New(), xxh: xxh3.New()} }

func (h fileHasher) Write(b []byte) (int, error) {
	h.sha.Write(b)
	h.xxh.Write(b)
	return len(b), nil
}

func (h fileHasher) digests() fileDigests {
	var d fileDigests
	h.sha.Sum(d.sha256[:0])
	d.xxh3 = h.xxh.Sum128().Bytes()
	return d
}

func hashReader(r io.ReaderAt, size int64) (fileDigests, error) {
	h := newFileHasher()
	if err := copyRange(h, r, 0, size); err != nil {
		return fileDigests{}, err
	}
	return h.digests(), nil
}

func copyRange(h io.Writer, r io.ReaderAt, off, n int64) error {
	if _, err := io.Copy(h, io.NewSectionReader(r, off, n)); err != nil {
		return fmt.Errorf("read %d bytes at %d: %w", n, off, err)
	}
	return nil
}
