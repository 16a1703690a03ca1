package store

import (
	"bytes"
	"encoding/binary"

	"github.com/weightfs/weightfs/delta"
)

// Whole reads of small objects, for Verify: a record read in one pread into a buffer the
// caller reuses, its CRC-32C, header and chunk table checked from those bytes. The ordinary
// path reads a record's header, its chunk table, its body for the CRC and its trailer apart,
// and Verify's reconstruction built a page per object (meta, plan, header read again, frame
// read, page cache): at 100,000 tensors of a mixture of experts these per-object costs and
// the heap they left were most of Verify (docs/benchmarks.md, "Tensor count (figure 11)").
//
// Both are fast paths only: on any failure (damage, an I/O error, a record too large) they
// report !ok and the caller takes the ordinary path, which reads the object again and says
// what is wrong with it, or routes around a damaged record (pack_copies.go).

// wholeRecordMax is the largest record read whole: larger ones are few, and their
// per-object costs small beside their bytes.
const wholeRecordMax = 4 << 20

// wholeContentMax is the most content bytes read whole (a record of 4 MiB may hold far more
// of a compressible tensor).
const wholeContentMax = 16 << 20

// readRecord reads object id's record whole into buf (grown as needed) and checks its
// CRC-32C and its header, which must name id. It returns the record, its header and buf.
func (o *objectStore) readRecord(id ID, buf []byte) (rec []byte, hdr objectHeader, _ []byte, ok bool) {
	f, err := o.st.be.OpenObject(id)
	if err != nil {
		return nil, hdr, buf, false
	}
	defer f.Close()
	size := f.Size()
	if size > wholeRecordMax || size < objectHeaderLen+objectTrailerLen {
		return nil, hdr, buf, false
	}
	if int64(cap(buf)) < size {
		buf = make([]byte, size, max(size, 64<<10))
	}
	rec = buf[:size]
	if readFull(f, rec, 0) != nil {
		return nil, hdr, buf, false
	}
	if hdr, _, ok = checkRecordBytes(rec); !ok || hdr.ID != id {
		return nil, hdr, buf, false
	}
	return rec, hdr, buf, true
}

// checkRecordBytes checks a record (an object file) held whole: its CRC-32C against its
// trailer and its header against its length. It returns the header and the CRC stored.
func checkRecordBytes(rec []byte) (hdr objectHeader, crc uint32, ok bool) {
	if len(rec) < objectHeaderLen+objectTrailerLen {
		return hdr, 0, false
	}
	body := len(rec) - objectTrailerLen
	crc = binary.LittleEndian.Uint32(rec[body:])
	if crc32c(rec[:body]) != crc {
		return hdr, 0, false
	}
	hdr, err := parseObjectHeader(rec[:objectHeaderLen], int64(len(rec)))
	return hdr, crc, err == nil
}

// chunkTableBytes parses the chunk table of a full object's record held whole (hdr its
// header, checked).
func chunkTableBytes(rec []byte, hdr *objectHeader) (chunkTable, bool) {
	at := int64(objectHeaderLen + chunkTableHead)
	if int64(len(rec)) < at {
		return chunkTable{}, false
	}
	size, n, err := readChunkTableHead(rec[objectHeaderLen:], hdr)
	if err != nil || at+4*n > int64(len(rec)) {
		return chunkTable{}, false
	}
	t, err := parseChunkSizes(rec[at:at+4*n], size, n, hdr)
	return t, err == nil
}

// checkWhole is Verify's check of one object file (checker.checkObject) for a small record
// read whole: CRC, header, chunk table, and the delta section opened (with its context, for
// a version-2 section). The header and the delta section are cached as openObject and
// loadDelta cache them, and the CRC noted as checked. It returns the delta section's body
// version (0: none) and buf, to be reused.
func (o *objectStore) checkWhole(id ID, buf []byte) (version int, _ []byte, ok bool) {
	epoch := o.fillEpoch()
	rec, hdr, buf, ok := o.readRecord(id, buf)
	if !ok {
		return 0, buf, false
	}
	info := &objectInfo{hdr: hdr}
	if hdr.Kind == kindFull {
		if info.table, ok = chunkTableBytes(rec, &hdr); !ok {
			return 0, buf, false
		}
	}
	o.cacheFill(epoch, func() { o.objInfos.add(id, info, int64(64+8*len(info.table.Offsets))) })
	o.crcChecked.add(id)
	if !hdr.HasDelta() {
		return 0, buf, true
	}
	if d, cached := o.deltas.get(id); cached {
		return d.info.Version, buf, true
	}
	at, end := hdr.DeltaOffset(), hdr.DeltaOffset()+hdr.DeltaLen
	if at < objectHeaderLen || end > int64(len(rec)) {
		return 0, buf, false
	}
	o.deltaReads.Add(1)
	d, err := o.openDeltaSection(id, epoch, hdr, bytes.Clone(rec[at:end]), nil)
	if err != nil {
		return 0, buf, false
	}
	return d.info.Version, buf, true
}

// readWholeFull reads the content of full object id into content (grown as needed) from its
// record read whole into rec, when this process holds its header (Verify's checkWhole read
// it) and the record is small. Every frame is decompressed; the caller checks the content's
// SHA-256. It returns the content and the buffers, to be reused.
func (o *objectStore) readWholeFull(id ID, rec, content []byte) (_, _, _ []byte, ok bool) {
	info, cached := o.objInfos.get(id)
	if !cached || info.hdr.Kind != kindFull || info.hdr.FileSize() > wholeRecordMax || info.hdr.ContentLen > wholeContentMax {
		return nil, rec, content, false
	}
	r, hdr, rec, ok := o.readRecord(id, rec)
	if !ok || hdr != info.hdr {
		return nil, rec, content, false
	}
	t := &info.table
	if t.Count() != int(chunkCount(hdr.ContentLen, t.Size)) || t.Offsets[0] < objectHeaderLen || t.Offsets[t.Count()] > int64(len(r))-objectTrailerLen {
		return nil, rec, content, false
	}
	if int64(cap(content)) < hdr.ContentLen {
		content = make([]byte, hdr.ContentLen, max(hdr.ContentLen, 64<<10))
	}
	out := content[:hdr.ContentLen]
	scratch := o.chunkScratch.Get().(*[]byte)
	defer o.chunkScratch.Put(scratch)
	for i := range t.Count() {
		lo, hi := t.Offsets[i], t.Offsets[i+1]
		if lo > hi {
			return nil, rec, content, false
		}
		at := int64(i) * t.Size
		dst := out[at : at+t.ChunkLen(i, hdr.ContentLen)]
		var err error
		if *scratch, err = o.st.codec.decompressChunk(dst, r[lo:hi], *scratch, hdr.Width); err != nil {
			return nil, rec, content, false
		}
	}
	return out, rec, content, true
}

// readWhole is readWholeFull of a full object, and of a delta object whose base is a small
// full object: the base read whole, the delta section (loaded and checked by Verify's
// checkWhole, else read now) applied forward to it, block by block as a page build applies
// it (applySteps). Longer chains take the ordinary path.
func (o *objectStore) readWhole(id ID, rec, content []byte) (_, _, _ []byte, ok bool) {
	info, cached := o.objInfos.get(id)
	if !cached || info.hdr.Kind != kindDelta {
		return o.readWholeFull(id, rec, content)
	}
	d, err := o.loadDelta(id)
	if err != nil || d.hdr != info.hdr {
		return nil, rec, content, false
	}
	out, rec, content, ok := o.readWholeFull(d.hdr.Base, rec, content)
	if !ok || int64(len(out)) != d.hdr.ContentLen {
		return nil, rec, content, false
	}
	if o.applySteps([]planStep{{id, delta.Forward}}, out, 0) != nil {
		return nil, rec, content, false
	}
	return out, rec, content, true
}
