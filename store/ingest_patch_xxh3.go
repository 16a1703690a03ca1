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
	base   *xxh3.Hasher // the base file: nil when the patch records no base_xxh3
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
	if c.base != nil {
		if got := c.base.Sum128().Bytes(); got != c.pf.BaseXXH3 {
			return badPatch("base_xxh3 %x is not the latest version's file (xxh3-128 %x)", c.pf.BaseXXH3, got)
		}
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

// checkWholeXXH3 checks the xxh3-128 a patch claims of a file it carries whole: the result
// from the patch's bytes r (size bytes), the base (when it names one) from base file bf of
// version baseV as the store reads it.
func (w *Writer) checkWholeXXH3(pf delta.PatchFile, r io.ReaderAt, size int64, baseV uint64, bf *manifestFile) error {
	if !pf.HasXXH3 {
		return nil
	}
	if !pf.New() && bf != nil {
		src, err := w.s.OpenFile(baseV, bf.Path)
		if err != nil {
			return err
		}
		got, err := xxh3OfReader(src, bf.Size)
		src.Close()
		if err != nil {
			return fmt.Errorf("read the base: %w", err)
		}
		if got != pf.BaseXXH3 {
			return badPatch("base_xxh3 %x is not the latest version's file (xxh3-128 %x)", pf.BaseXXH3, got)
		}
	}
	got, err := xxh3OfReader(r, size)
	if err != nil {
		return patchInputError(err)
	}
	if got != pf.ResultXXH3 {
		return badPatch("the patch makes a file of xxh3-128 %x, its result_xxh3 is %x", got, pf.ResultXXH3)
	}
	return nil
}

// xxh3OfReader is the xxh3-128 of r's first size bytes.
func xxh3OfReader(r io.ReaderAt, size int64) ([16]byte, error) {
	h := xxh3.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
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
