package store

import (
	"fmt"
	"io"

	"github.com/weightfs/weightfs/delta"
	"github.com/zeebo/xxh3"
)

// A patch's xxh3-128 claims (docs/format.md Part III §2): a file's base_xxh3 and
// result_xxh3, and each changed tensor's "xxh3" in params:PATH. Every claim a patch written
// in makes is checked, as its SHA-256 ones are: a wrong one refuses the patch (ErrBadPatch),
// whatever its SHA-256 says. A file patched by tensor is hashed in the pass that already
// reads its base and new bytes (either path); a file carried whole from the patch's bytes,
// and its base, when claimed, from the store. xxh3-128 runs at memory speed: a few
// hundredths of a CPU-second per 200 MB beside the pass's SHA-256.

// xxh3Claims hashes one file patched by tensor as its pass reads it, and checks what the
// patch claims of it. Write takes the new file's bytes in order (from offset 0), writeBase
// the base file's bytes in order. Not safe for concurrent use.
type xxh3Claims struct {
	pf     delta.PatchFile
	result *xxh3.Hasher // the new file: nil when the patch records no xxh3-128 of it
	base   *xxh3.Hasher // the base file: nil when the patch records no base_xxh3, or baseKnown
	// baseKnown is the base file's xxh3-128 known from an earlier pass over its bytes
	// (knownBase): its bytes are not hashed again.
	baseKnown *[16]byte
	// fromPass says that the changed tensors' digests come from the pass (fromEntry), which
	// hashed each one's bytes for its manifest entry: Write does not hash them again.
	fromPass bool
	// The changed tensors whose digest the patch claims, in data order, and the one being
	// hashed (the next whose end the bytes have not passed).
	tensors []claimedTensor
	cur     int
	tensor  *xxh3.Hasher
	off     int64
}

type claimedTensor struct {
	name       string
	begin, end int64 // file offsets
	want, got  [16]byte
}

// newXXH3Claims is the checker of file pf of patch p, whose new header is hdr; nil when the
// patch claims no xxh3-128 of it.
func newXXH3Claims(p *delta.Patch, pf delta.PatchFile, hdr *delta.Header) *xxh3Claims {
	c := &xxh3Claims{pf: pf}
	if pf.HasXXH3 {
		c.result = xxh3.New()
		if !pf.New() {
			c.base = xxh3.New()
		}
	}
	want := map[string][16]byte{}
	for _, t := range p.TensorsOf(pf.Name) {
		if t.ResultXXH3 != [16]byte{} { // a patch records every tensor's digest or none
			want[t.Name] = t.ResultXXH3
		}
	}
	for _, t := range hdr.Tensors { // data order
		if d, ok := want[t.Name]; ok {
			c.tensors = append(c.tensors, claimedTensor{name: t.Name, begin: hdr.DataStart() + t.Begin, end: hdr.DataStart() + t.End, want: d})
		}
	}
	if c.result == nil && len(c.tensors) == 0 {
		return nil
	}
	c.tensor = xxh3.New()
	return c
}

// Write takes the next bytes of the new file.
func (c *xxh3Claims) Write(b []byte) (int, error) {
	if c == nil {
		return len(b), nil
	}
	if c.result != nil {
		c.result.Write(b)
	}
	end := c.off + int64(len(b))
	if c.fromPass {
		c.off = end
		return len(b), nil
	}
	for c.cur < len(c.tensors) {
		t := &c.tensors[c.cur]
		if t.begin >= end {
			break
		}
		if t.end > c.off {
			c.tensor.Write(b[max(t.begin, c.off)-c.off : min(t.end, end)-c.off])
		}
		if t.end > end {
			break
		}
		t.got = c.tensor.Sum128().Bytes()
		c.tensor.Reset()
		c.cur++
	}
	c.off = end
	return len(b), nil
}

// writeBase takes the next bytes of the base file.
func (c *xxh3Claims) writeBase(b []byte) {
	if c != nil && c.base != nil {
		c.base.Write(b)
	}
}

// check compares what was hashed (the whole of both files) with the claims: the base first
// (another base explains a wrong result), then the file, then each tensor.
func (c *xxh3Claims) check() error {
	if c == nil {
		return nil
	}
	if d := c.baseDigest(); d != nil && *d != c.pf.BaseXXH3 {
		return badPatch("base_xxh3 %x is not the latest version's file (xxh3-128 %x)", c.pf.BaseXXH3, *d)
	}
	if c.result != nil {
		if got := c.result.Sum128().Bytes(); got != c.pf.ResultXXH3 {
			return badPatch("the patch makes a file of xxh3-128 %x, its result_xxh3 is %x", got, c.pf.ResultXXH3)
		}
	}
	for _, t := range c.tensors {
		if t.got != t.want {
			return badPatch("tensor %q: the patch makes its bytes of xxh3-128 %x, its \"xxh3\" is %x", t.name, t.got, t.want)
		}
	}
	if c.cur != len(c.tensors) {
		return fmt.Errorf("tensor %q: its bytes were not all hashed: %w", c.tensors[c.cur].name, ErrCorrupt)
	}
	return nil
}

// baseDigest is the base file's xxh3-128 as hashed or known; nil when the patch claims none.
func (c *xxh3Claims) baseDigest() *[16]byte {
	switch {
	case c.baseKnown != nil:
		return c.baseKnown
	case c.base != nil:
		d := c.base.Sum128().Bytes()
		return &d
	}
	return nil
}

// knownBase takes the base file's xxh3-128 from r when an earlier pass over the same bytes
// computed it (renders.knownFileXXH3: a patch's result checked, a render), so that the pass
// does not hash the base file again (a fast path's; the reference path hashes it).
func (c *xxh3Claims) knownBase(r *renders, base ID) {
	if c == nil || c.base == nil {
		return
	}
	if d, ok := r.knownFileXXH3(base); ok {
		c.base, c.baseKnown = nil, &d
	}
}

// fromEntry makes the changed tensors' claims compare with the digests the pass computed of
// their bytes for their manifest entries (a fast path's pieceHasher) instead of hashing the
// same bytes a second time here. Call before any Write; set the digests with tensorDigests.
func (c *xxh3Claims) fromEntry() {
	if c != nil {
		c.fromPass = true
	}
}

// tensorDigests gives each claimed tensor the digest of its entry in tensors (the pass's
// manifest entries, by name); a tensor whose entry has none stays unhashed (check: damage).
func (c *xxh3Claims) tensorDigests(tensors []manifestTensor) {
	if c == nil || !c.fromPass {
		return
	}
	byName := make(map[string]xxh3Digest, len(tensors))
	for i := range tensors {
		byName[tensors[i].Name] = tensors[i].XXH3
	}
	c.cur = 0
	for i := range c.tensors {
		d, ok := byName[c.tensors[i].name]
		if !ok || d.IsZero() {
			return
		}
		c.tensors[i].got = d
		c.cur = i + 1
	}
}

// note remembers the files' digests the check found true (result: the new file, of SHA-256
// result; base: the base file, of SHA-256 base), for the next patch's base_xxh3 and the
// renders' checks (renders.noteFileXXH3). Call after check returned nil.
func (c *xxh3Claims) note(r *renders, result, base ID) {
	if c == nil {
		return
	}
	if c.result != nil {
		r.noteFileXXH3(result, c.result.Sum128().Bytes())
	}
	if c.base != nil {
		r.noteFileXXH3(base, c.base.Sum128().Bytes())
	}
}

// checkWholeXXH3 checks the xxh3-128 a patch claims of a file it carries whole: the result
// from the patch's bytes r (size bytes), the base (when it names one) from base file bf of
// version baseV as the store reads it.
func (w *Writer) checkWholeXXH3(pf delta.PatchFile, r io.ReaderAt, size int64, baseV uint64, bf *manifestFile) error {
	if !pf.HasXXH3 {
		return nil
	}
	if !pf.New() && bf != nil {
		got, known := w.s.renders.knownFileXXH3(bf.SHA256)
		if !known {
			var err error
			if got, err = xxh3OfReader(baseObjects{w.in, bf}, bf.Size); err != nil {
				return fmt.Errorf("read the base: %w", err)
			}
		}
		if got != pf.BaseXXH3 {
			return badPatch("base_xxh3 %x is not the latest version's file (xxh3-128 %x)", pf.BaseXXH3, got)
		}
		if !known {
			w.s.renders.noteFileXXH3(bf.SHA256, got)
		}
	}
	got, err := xxh3OfReader(r, size)
	if err != nil {
		return patchInputError(err)
	}
	if got != pf.ResultXXH3 {
		return badPatch("the patch makes a file of xxh3-128 %x, its result_xxh3 is %x", got, pf.ResultXXH3)
	}
	if sum, ok := w.fileSHA256(pf.Name); ok {
		w.s.renders.noteFileXXH3(sum, got) // the file AddFile hashed from the same bytes r
	}
	return nil
}

// baseObjects reads a file of a sealed version (its manifest entry f) from its objects, through
// the ingest's reads of bases (the materialized copy, the base in memory, the objects: every
// byte checked), without asking for the copy to be brought forward as a read of the file
// through Store.OpenFile does (copy_defer.go: a patch leaves a deferred copy deferred).
type baseObjects struct {
	in *ingester
	f  *manifestFile
}

func (b baseObjects) ReadAt(p []byte, off int64) (int, error) {
	f := b.f
	if off < 0 || off >= f.Size {
		return 0, io.EOF
	}
	var atEnd error
	if rest := f.Size - off; int64(len(p)) > rest {
		p, atEnd = p[:rest], io.EOF
	}
	n := 0
	for n < len(p) {
		at := off + int64(n)
		id, begin, end, h := f.ID, int64(0), f.Size, objHint{path: f.Path}
		if f.Kind == kindSafetensors {
			id, end, h.header = f.Header, f.HeaderLen, true
			for i := range f.Tensors {
				t := &f.Tensors[i]
				if tb, te := f.HeaderLen+t.Begin, f.HeaderLen+t.End; at >= tb && at < te {
					id, begin, end, h = t.ID, tb, te, objHint{path: f.Path, tensor: t.Name}
					break
				}
			}
			if at >= f.HeaderLen && id == f.Header {
				return n, fmt.Errorf("read %s at %d: no tensor holds it: %w", f.Path, at, ErrCorrupt)
			}
		}
		k := int(min(int64(len(p)-n), end-at))
		if err := b.in.readBase(id, h, at-begin, p[n:n+k], readOpts{}); err != nil {
			return n, err
		}
		n += k
	}
	return n, atEnd
}

// xxh3OfReader is the xxh3-128 of r's first size bytes.
func xxh3OfReader(r io.ReaderAt, size int64) ([16]byte, error) {
	h := xxh3.New()
	if _, err := io.CopyBuffer(h, io.NewSectionReader(r, 0, size), make([]byte, min(max(size, 1), 1<<20))); err != nil {
		return [16]byte{}, err
	}
	return h.Sum128().Bytes(), nil
}

// checkPatchedFile checks the claims of file pf, patched by tensor, that its pass made with
// SHA-256 sum and xxh3-128 x: result_sha256 (unless the patch records xxh3-128 only), then
// x's.
func checkPatchedFile(pf delta.PatchFile, sum ID, x *xxh3Claims) error {
	if !pf.XXH3Only && sum != ID(pf.ResultSHA256) {
		return badPatch("the patch makes a file of SHA-256 %s, its result_sha256 is %x", sum, pf.ResultSHA256)
	}
	return x.check()
}
