package delta

import (
	"encoding/binary"
	"fmt"
	"io"
	"maps"
)

// The index encoding "leb128_gaps" (docs/format.md Part III §2, "Index encodings"): a denser
// form of a patch's indices that a trainer may write into a read-write mount's patches/. Each
// changed tensor NAME carries, instead of NAME.indices, a 1-D U8 tensor NAME.gaps: its
// changed element indices as unsigned LEB128 varints of their gaps, the first the first index
// itself, each next one idx[k]-idx[k-1]-1, every varint in its shortest form. At RL rates
// (a few % of elements change, mean gap ~40) that is ~1.04 bytes an index against I32's 4.
//
// The reader turns the streams back into the I32/I64 indices a raw patch holds: a cursor
// decodes its batch into the same little-endian buffer (patchCursor.idx) that a raw patch's
// batch is read into, so everything after the parse (the apply's scans and writes, the
// store's CommitPatch) is the same code for both encodings. Only what the patch reader takes
// in changes: what weightfs serves and writes stays raw (TRL's readers know no other).

// Index encodings: the values of a patch's "encoding" metadata.
const (
	EncodingRaw  = "raw"         // NAME.indices: I32 (I64 from 2^31 elements), TRL's Encoding.RAW
	EncodingGaps = "leb128_gaps" // NAME.gaps: U8, LEB128 varints of the gaps

	gapsSuffix   = ".gaps"
	maxGapVarint = 9       // bytes: 63 bits, every gap of a tensor of at most 2^63-1 elements
	gapBuffer    = 1 << 16 // bytes of a stream read at once
)

// AppendGaps appends the leb128_gaps stream of idx (strictly ascending, non-negative) to dst.
func AppendGaps(dst []byte, idx []int64) []byte {
	last := int64(-1)
	for _, i := range idx {
		dst = binary.AppendUvarint(dst, uint64(i-last-1))
		last = i
	}
	return dst
}

// gapVarint decodes the varint at the start of b: n > 0 its length, n == 0 when b ends inside
// it, n < 0 when it is not in its shortest form (a last byte of zero after others) or longer
// than maxGapVarint bytes.
func gapVarint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < maxGapVarint; i++ {
		c := b[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				return 0, -1
			}
			return v, i + 1
		}
	}
	if len(b) >= maxGapVarint {
		return 0, -1
	}
	return 0, 0
}

// gapMark is where a stream's pair k*Patch.markEvery starts: the file offset of its varint and
// the index before it (-1 for the first), so a cursor can start at any pair without decoding
// the stream from its beginning.
type gapMark struct{ off, last int64 }

// gapTable is one tensor's stream: its file offsets and its marks.
type gapTable struct {
	begin, end int64
	marks      []gapMark
}

// gapStream decodes one tensor's stream from the patch file, a buffer at a time, checking
// each varint and each index it makes.
type gapStream struct {
	r        io.ReaderAt
	off, end int64 // the next unread file offset; the stream's end
	buf      []byte
	pos      int
	last     int64 // the index decoded last (-1 before the first)
	decoded  int64 // indices decoded, for the messages
	elements int64
	name     string
}

// fileOff is the file offset of the next varint.
func (s *gapStream) fileOff() int64 { return s.off - int64(len(s.buf)-s.pos) }

// done reports that every byte of the stream has been decoded.
func (s *gapStream) done() bool { return s.pos == len(s.buf) && s.off == s.end }

// next decodes the next index.
func (s *gapStream) next() (int64, error) {
	if len(s.buf)-s.pos < maxGapVarint && s.off < s.end {
		if err := s.refill(); err != nil {
			return 0, err
		}
	}
	v, n := gapVarint(s.buf[s.pos:])
	switch {
	case n < 0:
		return 0, malformedPatch("tensor %q: gap %d is an overlong varint", s.name, s.decoded)
	case n == 0:
		return 0, malformedPatch("tensor %q: the gaps end after %d indices, the values say more", s.name, s.decoded)
	case v >= uint64(s.elements-s.last-1):
		return 0, malformedPatch("tensor %q: gap %d (%d) after index %d runs past the tensor's %d elements", s.name, s.decoded, v, s.last, s.elements)
	}
	s.pos += n
	s.last += 1 + int64(v)
	s.decoded++
	return s.last, nil
}

// refill keeps the unread bytes and reads what follows them.
func (s *gapStream) refill() error {
	rest := s.buf[s.pos:]
	if cap(s.buf) < gapBuffer {
		s.buf = make([]byte, 0, gapBuffer)
	}
	k := copy(s.buf[:cap(s.buf)], rest)
	n := int(min(int64(cap(s.buf)-k), s.end-s.off))
	s.buf = s.buf[:k+n]
	if err := readFull(s.r, s.buf[k:], s.off); err != nil {
		return fmt.Errorf("patch: read the gaps of %q: %w", s.name, err)
	}
	s.off += int64(n)
	s.pos = 0
	return nil
}

// indexEntry is the safetensors entry that holds tensor name's indices in this encoding.
func (p *Patch) indexEntry(name string) (Tensor, bool) {
	if p.Encoding == EncodingGaps {
		t, ok := p.entries[name+gapsSuffix]
		return t, ok
	}
	t, ok := p.entries[name+indicesSuffix]
	return t, ok
}

// indexGaps reads every tensor's stream once: it checks every varint and index (ascending by
// construction, inside the tensor), that the stream holds exactly as many indices as the
// values, and records the marks cursors start from. A malformed stream is refused at open.
func (p *Patch) indexGaps() error {
	if p.markEvery == 0 {
		p.markEvery = cursorBatch
	}
	p.gaps = make(map[string]*gapTable, len(p.Plan.Tensors))
	var buf []byte
	for _, t := range p.Plan.Tensors {
		e, _ := p.indexEntry(t.Name)
		tb := &gapTable{begin: p.Header.DataStart() + e.Begin, end: p.Header.DataStart() + e.End}
		s := &gapStream{r: p.r, off: tb.begin, end: tb.end, buf: buf, last: -1, elements: t.Elements, name: t.Name}
		for k := int64(0); k < t.Changed; k++ {
			if k%p.markEvery == 0 {
				tb.marks = append(tb.marks, gapMark{off: s.fileOff(), last: s.last})
			}
			if _, err := s.next(); err != nil {
				return err
			}
		}
		if !s.done() {
			return malformedPatch("tensor %q: the gaps hold more bytes than its %d indices", t.Name, t.Changed)
		}
		buf = s.buf[:0]
		p.gaps[t.Name] = tb
	}
	return nil
}

// gapCursor sets c up to decode pairs [from, ...) of its tensor's stream: from the mark at
// or before from, skipping the pairs in between at its first fill.
func (p *Patch) gapCursor(c *patchCursor, from int64) {
	tb := p.gaps[c.t.Name]
	k := from / p.markEvery
	if tb == nil || k >= int64(len(tb.marks)) {
		return // no pairs to read (left is 0)
	}
	m := tb.marks[k]
	c.gaps = &gapStream{r: p.r, off: m.off, end: tb.end, last: m.last, decoded: k * p.markEvery, elements: c.t.Elements, name: c.t.Name}
	c.skip = from - k*p.markEvery
}

// fillGaps decodes the batch's n indices into c.idx, at the width of a raw patch's indices.
func (c *patchCursor) fillGaps(n int) error {
	for ; c.skip > 0; c.skip-- {
		if _, err := c.gaps.next(); err != nil {
			return err
		}
	}
	for i := 0; i < n; i++ {
		idx, err := c.gaps.next()
		if err != nil {
			return err
		}
		if c.idxSize == 8 {
			binary.LittleEndian.PutUint64(c.idx[8*i:], uint64(idx))
		} else {
			binary.LittleEndian.PutUint32(c.idx[4*i:], uint32(idx))
		}
	}
	return nil
}

// RewriteGaps returns the patch p with its indices in the leb128_gaps encoding: the same
// metadata but "encoding", each NAME.indices replaced by NAME.gaps, the values, whole files
// and headers as they are. The trainer's writer (python/weightfs) writes this encoding
// itself; this is for tests and tools.
func RewriteGaps(p *Patch) ([]byte, error) {
	meta := maps.Clone(p.Header.Metadata)
	meta[metaEncoding] = EncodingGaps
	var entries []Tensor
	var data [][]byte
	read := func(name string) ([]byte, error) {
		e := p.entries[name]
		b := make([]byte, e.End-e.Begin)
		if err := readFull(p.r, b, p.Header.DataStart()+e.Begin); err != nil {
			return nil, fmt.Errorf("patch: read %q: %w", name, err)
		}
		return b, nil
	}
	for _, t := range p.Plan.Tensors {
		idx := make([]int64, 0, t.Changed)
		c := p.newCursor(t)
		for {
			i, _, ok, err := c.next()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			idx = append(idx, i)
		}
		gaps := AppendGaps(nil, idx)
		vals, err := read(t.Name + valuesSuffix)
		if err != nil {
			return nil, err
		}
		entries = append(entries, Tensor{Name: t.Name + gapsSuffix, DType: DTypeU8, Shape: []int64{int64(len(gaps))}},
			Tensor{Name: t.Name + valuesSuffix, DType: t.DType, Shape: []int64{t.Changed}})
		data = append(data, gaps, vals)
	}
	for _, prefix := range []string{WholeFilePrefix, HeaderPrefix} {
		for _, f := range p.Plan.Files {
			if (prefix == WholeFilePrefix) != f.Whole || (prefix == HeaderPrefix && f.NewHeader == nil) {
				continue
			}
			b, err := read(prefix + f.Name)
			if err != nil {
				return nil, err
			}
			entries = append(entries, Tensor{Name: prefix + f.Name, DType: DTypeU8, Shape: []int64{int64(len(b))}})
			data = append(data, b)
		}
	}
	out, err := EncodeHeader(meta, entries)
	if err != nil {
		return nil, fmt.Errorf("patch header: %w", err)
	}
	for _, b := range data {
		out = append(out, b...)
	}
	return out, nil
}
