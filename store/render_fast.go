package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/weightfs/weightfs/delta"
	"github.com/zeebo/xxh3"
)

// The one-step patch from the store's deltas (docs/design.md, "A one-step patch from the
// deltas"). The patch of v against its predecessor K carries, for each changed tensor, the
// positions and new values of the elements that differ, which are exactly what the forward
// delta section of the tensor's object against K's tensor holds: so instead of diffing both
// versions and hashing both (delta.BuildPatchWith, the reference path), the plan comes from
// the manifests and the delta sections' change counts, and one pass over the result's files
// gives the values, the xxh3-128 digests of the result and of each changed tensor, and the
// base's xxh3-128 (the result's bytes with the deltas applied backward). The SHA-256 digests
// are the manifests'. The bytes are those of the reference path; TestFastPatchMatchesReference
// renders every patch of generated series both ways. Where a file or tensor does not fit
// (no delta section against the same tensor of K, a file whose header or size changed, a
// safetensors-looking blob) the whole patch takes the reference path.

// errNoFastPatch says the fast path does not apply to a patch; it wraps the reason.
var errNoFastPatch = errors.New("no one-step patch from the deltas")

// fastChunk is the read size of the fast path's pass over a tensor: two delta blocks of bf16.
const fastChunk = 4 << 20

// fastTensor is one tensor of a sparsely patched file, in the result header's order.
type fastTensor struct {
	t    delta.Tensor
	id   ID           // the result's object
	d    *deltaObject // its delta section against the base's tensor; nil when unchanged
	plan int          // index into the plan's tensors; -1 when unchanged
}

// fastFile is one changed file of the patch.
type fastFile struct {
	f, bf   *manifestFile // result, base (nil: new file, carried whole)
	src     *versionFile
	bsrc    *versionFile  // the base's file, read only when the file is carried whole
	h       *delta.Header // sparse files: the result's header
	tensors []fastTensor
	plan    int // index into the plan's files
}

// planFastPatch plans the patch from base to cur from the manifests and the delta sections.
// An error wrapping errNoFastPatch sends the caller to the reference path; any other error
// (ErrCorrupt: a damaged object) is the patch's.
func (r *renders) planFastPatch(base, cur *version, opts delta.PatchBuildOptions) (delta.PatchPlan, []*fastFile, error) {
	plan := delta.PatchPlan{ModelVersion: cur.m.Version, BaseVersion: base.m.Version}
	var files []*fastFile
	for i := range cur.m.Files {
		f := &cur.m.Files[i]
		src := r.st.newVersionFile(cur, f, readOpts{check: true})
		h, herr := delta.ReadHeader(src, f.Size)
		if herr == nil {
			for _, t := range h.Tensors {
				plan.TotalElements += t.Elements()
			}
		}
		bf := base.files[f.Path]
		if bf != nil && bf.SHA256 == f.SHA256 {
			continue // equal in both: the reference path leaves it out too
		}
		ff := &fastFile{f: f, bf: bf, src: src, plan: len(plan.Files)}
		pf := delta.PatchFile{Name: f.Path, HasXXH3: true, ResultSHA256: f.SHA256}
		if bf != nil {
			pf.BaseSHA256 = bf.SHA256
			ff.bsrc = r.st.newVersionFile(base, bf, readOpts{check: true})
		}
		switch {
		case herr != nil:
			// Not safetensors to the patch's parser: the reference path carries it whole.
			pf.Whole, pf.WholeSize = true, f.Size
		case bf == nil || f.Kind != kindSafetensors || bf.Kind != kindSafetensors || f.Size != bf.Size ||
			f.Header != bf.Header || f.HeaderLen != bf.HeaderLen || h.DataStart() != f.HeaderLen:
			return plan, nil, fmt.Errorf("%w: %s is not the same safetensors layout in both versions", errNoFastPatch, f.Path)
		default:
			ff.h = h
			tensors, err := r.planFastTensors(ff, &plan, opts)
			if err != nil {
				return plan, nil, err
			}
			ff.tensors = tensors
		}
		plan.Files = append(plan.Files, pf)
		files = append(files, ff)
	}
	return plan, files, nil
}

// planFastTensors plans the tensors of a sparsely patched file: each one whose object differs
// from the base's must be a delta section against it.
func (r *renders) planFastTensors(ff *fastFile, plan *delta.PatchPlan, opts delta.PatchBuildOptions) ([]fastTensor, error) {
	byName := func(f *manifestFile) map[string]*manifestTensor {
		m := make(map[string]*manifestTensor, len(f.Tensors))
		for j := range f.Tensors {
			m[f.Tensors[j].Name] = &f.Tensors[j]
		}
		return m
	}
	cur, base := byName(ff.f), byName(ff.bf)
	out := make([]fastTensor, 0, len(ff.h.Tensors))
	changed := false
	for _, t := range ff.h.Tensors {
		mt, bt := cur[t.Name], base[t.Name]
		if mt == nil || bt == nil || mt.Begin != t.Begin || mt.End != t.End || bt.Begin != t.Begin || bt.End != t.End ||
			mt.DType != t.DType || bt.DType != t.DType {
			return nil, fmt.Errorf("%w: tensor %s of %s differs from its header or its base", errNoFastPatch, t.Name, ff.f.Path)
		}
		ft := fastTensor{t: t, id: mt.ID, plan: -1}
		if mt.ID != bt.ID && t.ByteLen() > 0 {
			d, err := r.st.objects.loadDelta(mt.ID)
			if errors.Is(err, errStale) {
				return nil, fmt.Errorf("%w: tensor %s of %s is a whole copy without a delta section", errNoFastPatch, t.Name, ff.f.Path)
			}
			if err != nil {
				return nil, err
			}
			switch {
			case d.hdr.Base != bt.ID:
				return nil, fmt.Errorf("%w: the delta section of tensor %s of %s is against %s, not the base's %s", errNoFastPatch, t.Name, ff.f.Path, d.hdr.Base, bt.ID)
			case d.info.Width != t.DType.Size() || d.info.Elements != t.Elements() || d.info.Changed <= 0:
				return nil, fmt.Errorf("%w: the delta section of tensor %s of %s (%d of %d elements of %d bytes changed) does not fit it",
					errNoFastPatch, t.Name, ff.f.Path, d.info.Changed, d.info.Elements, d.info.Width)
			case mt.Base == bt.ID && mt.Changed != d.info.Changed:
				return nil, fmt.Errorf("%w: tensor %s of %s: the manifest counts %d changed elements, its delta section %d",
					errNoFastPatch, t.Name, ff.f.Path, mt.Changed, d.info.Changed)
			}
			ft.d, ft.plan = d, len(plan.Tensors)
			pt := delta.PatchTensor{File: ff.f.Path, Name: t.Name, DType: t.DType, Elements: t.Elements(), Changed: d.info.Changed}
			if opts.Shapes {
				pt.Shape = append([]int64{}, t.Shape...)
			}
			plan.Tensors = append(plan.Tensors, pt)
			changed = true
		}
		out = append(out, ft)
	}
	if !changed {
		// Another SHA-256 but the same objects: the reference path finds what it finds.
		return nil, fmt.Errorf("%w: %s changed but none of its objects did", errNoFastPatch, ff.f.Path)
	}
	return out, nil
}

// writeFastPatch writes the patch from base to cur from the deltas. It returns an error
// wrapping errNoFastPatch, having written nothing, when the fast path does not apply.
func (r *renders) writeFastPatch(base, cur *version, w io.WriterAt, opts delta.PatchBuildOptions) (delta.PatchPlan, error) {
	plan, files, err := r.planFastPatch(base, cur, opts)
	if err != nil {
		return plan, err
	}
	// The digests are known only after the pass over the data: the header goes out with
	// placeholders (render_patchsize.go's, of the same length), and again once they are known.
	draft := plan
	draft.Files = append([]delta.PatchFile(nil), plan.Files...)
	draft.Tensors = append([]delta.PatchTensor(nil), plan.Tensors...)
	for i := range draft.Files {
		draft.Files[i].ResultXXH3 = placeholderXXH3
		if draft.Files[i].BaseSHA256 != [32]byte{} {
			draft.Files[i].BaseXXH3 = placeholderXXH3
		}
	}
	for i := range draft.Tensors {
		draft.Tensors[i].ResultXXH3 = placeholderXXH3
	}
	first, _, err := delta.EncodePatchHeader(draft)
	if err != nil {
		return plan, err
	}
	// The files' passes write their parts at once (sparseFiles): their WriteAt calls, 1 MiB
	// each, take turns, since w need not allow concurrent calls.
	pw, err := delta.NewPatchWriter(&lockedWriterAt{w: w}, draft)
	if err != nil {
		return plan, err
	}
	if err := r.sparseFiles(files, &plan, pw); err != nil {
		return plan, err
	}
	p := newFastPass(r)
	for _, ff := range files {
		if ff.h != nil {
			continue
		}
		if err := p.wholeFile(ff, &plan, pw); err != nil {
			return plan, fmt.Errorf("%s: %w", ff.f.Path, err)
		}
	}
	if err := pw.Close(); err != nil {
		return plan, err
	}
	header, _, err := delta.EncodePatchHeader(plan)
	if err != nil {
		return plan, err
	}
	if len(header) != len(first) {
		return plan, fmt.Errorf("patch header of %d bytes with its digests, %d with placeholders", len(header), len(first))
	}
	if _, err := w.WriteAt(header, 0); err != nil {
		return plan, fmt.Errorf("write patch header: %w", err)
	}
	r.noteDigests(&plan, files)
	return plan, nil
}

// sparseFiles makes the pass over each sparsely patched file, on up to GOMAXPROCS goroutines:
// each file's tensors are a part of the patch (delta.PatchWriter.Parts) and its digests its
// own entries of plan, so files do not wait for each other (a checkpoint's shards).
func (r *renders) sparseFiles(files []*fastFile, plan *delta.PatchPlan, pw *delta.PatchWriter) error {
	var sparse []*fastFile
	bounds := []int{}
	for _, ff := range files {
		if ff.h == nil {
			continue
		}
		first, end := -1, -1
		for _, ft := range ff.tensors {
			if ft.plan >= 0 {
				if first < 0 {
					first = ft.plan
				}
				end = ft.plan + 1
			}
		}
		if len(bounds) == 0 {
			bounds = append(bounds, first)
		}
		if first != bounds[len(bounds)-1] {
			return fmt.Errorf("%s: its patch tensors start at %d, not after the previous file's (%d)", ff.f.Path, first, bounds[len(bounds)-1])
		}
		bounds = append(bounds, end)
		sparse = append(sparse, ff)
	}
	if len(sparse) == 0 {
		return nil
	}
	parts, err := pw.Parts(bounds)
	if err != nil {
		return err
	}
	errs := make([]error, len(sparse))
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, ff := range sparse {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := newFastPass(r).sparseFile(ff, plan, parts[i])
			if err == nil {
				err = parts[i].Close()
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", ff.f.Path, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// lockedWriterAt serialises the WriteAt calls of an io.WriterAt.
type lockedWriterAt struct {
	mu sync.Mutex
	w  io.WriterAt
}

func (l *lockedWriterAt) WriteAt(p []byte, off int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.WriteAt(p, off)
}

// fastPass holds the buffers of one fast patch build.
type fastPass struct {
	r          *renders
	cur, bbuf  []byte
	idx        []uint32
	vals       []byte
	blocks     []*cachedBlock
	tensorHash *xxh3.Hasher
}

func newFastPass(r *renders) *fastPass {
	return &fastPass{r: r, cur: make([]byte, fastChunk), bbuf: make([]byte, fastChunk), tensorHash: xxh3.New()}
}

func (p *fastPass) release() {
	for _, cb := range p.blocks {
		cb.release()
	}
	p.blocks = p.blocks[:0]
}

// sparseFile reads the result file once: its bytes and each changed tensor's are hashed, the
// new values at the delta's positions fed to pw, and the base's bytes (the result's with the
// delta applied backward) hashed; the digests go into plan.
func (p *fastPass) sparseFile(ff *fastFile, plan *delta.PatchPlan, pw *delta.PatchWriter) error {
	hr, hb := xxh3.New(), xxh3.New()
	prefix := make([]byte, ff.h.DataStart())
	if err := readFull(ff.src, prefix, 0); err != nil {
		return err
	}
	hr.Write(prefix)
	hb.Write(prefix)
	defer p.release()
	for _, ft := range ff.tensors {
		t := ft.t
		width := int64(t.DType.Size())
		p.tensorHash.Reset()
		for off := int64(0); off < t.ByteLen(); off += fastChunk {
			n := min(fastChunk, t.ByteLen()-off)
			c := p.cur[:n]
			if err := readFull(ff.src, c, ff.h.DataStart()+t.Begin+off); err != nil {
				return fmt.Errorf("read tensor %s: %w", t.Name, err)
			}
			hr.Write(c)
			if ft.d == nil {
				hb.Write(c)
				continue
			}
			p.tensorHash.Write(c)
			b := p.bbuf[:n]
			copy(b, c)
			if err := p.chunkChanges(ft, off/width, c, b, pw); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			hb.Write(b)
		}
		if ft.plan >= 0 {
			plan.Tensors[ft.plan].ResultXXH3 = p.tensorHash.Sum128().Bytes()
		}
	}
	pf := &plan.Files[ff.plan]
	pf.ResultXXH3, pf.BaseXXH3 = hr.Sum128().Bytes(), hb.Sum128().Bytes()
	// The base's bytes were never read, only derived through the deltas: where an earlier
	// render computed the base file's digest from its own bytes, they must agree.
	if known, ok := p.r.fileXXH3.get(ff.bf.SHA256); ok && known != pf.BaseXXH3 {
		return fmt.Errorf("its delta sections lead back to bytes of xxh3-128 %x, version %d's file has %x: %w",
			pf.BaseXXH3, plan.BaseVersion, known, ErrCorrupt)
	}
	return nil
}

// noteDigests remembers the xxh3-128 of the files of a patch just written, by their SHA-256:
// each was computed from bytes read and checked, and checks the base digest of the next
// version's patch (sparseFile).
func (r *renders) noteDigests(plan *delta.PatchPlan, files []*fastFile) {
	for _, ff := range files {
		pf := &plan.Files[ff.plan]
		r.fileXXH3.add(ff.f.SHA256, pf.ResultXXH3, 64)
		if ff.h == nil && ff.bf != nil {
			r.fileXXH3.add(ff.bf.SHA256, pf.BaseXXH3, 64) // hashed from its own bytes
		}
	}
}

// chunkChanges feeds pw the changes of tensor ft in elements [first, first+len(c)/width) with
// their values from c (the result), and turns b (a copy of c) into the base's bytes.
func (p *fastPass) chunkChanges(ft fastTensor, first int64, c, b []byte, pw *delta.PatchWriter) error {
	d := ft.d
	w := d.info.Width
	n := int64(len(c) / w)
	lo, hi := d.parsed.BlockRange(first, n)
	p.idx, p.vals = p.idx[:0], p.vals[:0]
	for blk := lo; blk <= hi; blk++ {
		cb, err := p.r.st.objects.decodedBlock(ft.id, d, blk)
		if err != nil {
			return err
		}
		p.blocks = append(p.blocks, cb)
		db := cb.db
		start := db.Start()
		for i := range db.Changes() {
			at := start + int64(db.Position(i))
			if at < first {
				continue
			}
			if at >= first+n {
				break
			}
			rel := at - first
			p.idx = append(p.idx, uint32(rel))
			p.vals = append(p.vals, c[rel*int64(w):(rel+1)*int64(w)]...)
		}
		if err := db.Apply(b, first, delta.Backward); err != nil {
			return fmt.Errorf("apply delta: %v: %w", err, ErrCorrupt)
		}
	}
	p.release()
	return pw.Add(first, p.idx, p.vals)
}

// wholeFile hashes a file carried whole (and its base), checks both against the manifests'
// SHA-256 (these bytes go into the patch as they are read), and feeds its bytes to pw.
func (p *fastPass) wholeFile(ff *fastFile, plan *delta.PatchPlan, pw *delta.PatchWriter) error {
	pf := &plan.Files[ff.plan]
	sum, x, err := p.hashFile(ff.src, ff.f.Size)
	if err != nil {
		return err
	}
	if sum != ff.f.SHA256 {
		return fmt.Errorf("its bytes hash to %s, the manifest says %s: %w", sum, ff.f.SHA256, ErrCorrupt)
	}
	pf.ResultXXH3 = x
	if ff.bf != nil {
		sum, x, err := p.hashFile(ff.bsrc, ff.bf.Size)
		if err != nil {
			return err
		}
		if sum != ff.bf.SHA256 {
			return fmt.Errorf("its base hashes to %s, the manifest says %s: %w", sum, ff.bf.SHA256, ErrCorrupt)
		}
		pf.BaseXXH3 = x
	}
	for off := int64(0); off < ff.f.Size; off += fastChunk {
		c := p.cur[:min(fastChunk, ff.f.Size-off)]
		if err := readFull(ff.src, c, off); err != nil {
			return err
		}
		if err := pw.AddWhole(c); err != nil {
			return err
		}
	}
	return nil
}

// hashFile returns the SHA-256 and xxh3-128 of a file of size bytes.
func (p *fastPass) hashFile(r io.ReaderAt, size int64) (ID, [16]byte, error) {
	sh, xh := sha256.New(), xxh3.New()
	for off := int64(0); off < size; off += fastChunk {
		c := p.cur[:min(fastChunk, size-off)]
		if err := readFull(r, c, off); err != nil {
			return ID{}, [16]byte{}, err
		}
		sh.Write(c)
		xh.Write(c)
	}
	var id ID
	sh.Sum(id[:0])
	return id, xh.Sum128().Bytes(), nil
}
