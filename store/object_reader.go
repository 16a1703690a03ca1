package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"

	"github.com/weightfs/weightfs/delta"
)

// objectInfo is what the read path keeps of an object: its header and, for a full object,
// where each chunk's frame sits.
type objectInfo struct {
	hdr   objectHeader
	table chunkTable
}

// errStale says an object's representation changed under a cached plan (GC re-anchored a
// delta as a whole copy): the caller drops its caches and plans again.
var errStale = errors.New("object representation changed")

// objectError names the object in an error about it.
func objectError(id ID, err error) error { return fmt.Errorf("object %s: %w", id, err) }

// readFull reads len(b) bytes at off, or fails (a short object is corrupt).
func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("short read of %d bytes at %d: %w", len(b), off, ErrCorrupt)
	}
	return err
}

// openObject opens id, reads and checks its header (which must name id) and, for a full
// object, its chunk table.
// A packed record that fails is opened again: the pack layer serves another copy of the
// object when it has an intact one (pack_copies.go).
func (o *objectStore) openObject(id ID) (ObjectFile, *objectInfo, error) {
	for try := 0; ; try++ {
		epoch := o.fillEpoch()
		f, err := o.st.be.OpenObject(id)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil, fmt.Errorf("object %s is missing: %w (%w)", id, ErrCorrupt, err)
			}
			return nil, nil, err
		}
		info, err := readObjectInfo(f)
		if err == nil && info.hdr.ID != id {
			err = fmt.Errorf("file holds object %s: %w", info.hdr.ID, ErrCorrupt)
		}
		if err != nil {
			err = recordDamage(f, err)
			f.Close()
			if errors.Is(err, errOtherCopy) && try < maxCopyRetries {
				continue
			}
			return nil, nil, objectError(id, err)
		}
		o.cacheFill(epoch, func() { o.objInfos.add(id, info, int64(64+8*len(info.table.Offsets))) })
		return f, info, nil
	}
}

func readObjectInfo(f ObjectFile) (*objectInfo, error) {
	head := make([]byte, objectHeaderLen+chunkTableHead)
	if f.Size() < int64(len(head)) {
		head = head[:objectHeaderLen]
	}
	if f.Size() < objectHeaderLen {
		return nil, fmt.Errorf("object file of %d bytes is shorter than a header: %w", f.Size(), ErrCorrupt)
	}
	if err := readFull(f, head, 0); err != nil {
		return nil, fmt.Errorf("read object header: %w", err)
	}
	hdr, err := parseObjectHeader(head, f.Size())
	if err != nil {
		return nil, err
	}
	info := &objectInfo{hdr: hdr}
	if hdr.Kind != kindFull {
		return info, nil
	}
	size, n, err := readChunkTableHead(head[objectHeaderLen:], &hdr)
	if err != nil {
		return nil, err
	}
	sizes := make([]byte, 4*n)
	if err := readFull(f, sizes, objectHeaderLen+chunkTableHead); err != nil {
		return nil, fmt.Errorf("read chunk table: %w", err)
	}
	if info.table, err = parseChunkSizes(sizes, size, n, &hdr); err != nil {
		return nil, err
	}
	return info, nil
}

// objectInfoOf returns the cached header of id, reading it if needed.
func (o *objectStore) objectInfoOf(id ID) (*objectInfo, error) {
	if info, ok := o.objInfos.get(id); ok {
		return info, nil
	}
	f, info, err := o.openObject(id)
	if err != nil {
		return nil, err
	}
	f.Close()
	return info, nil
}

// objectFileCRC computes the CRC-32C of the first body bytes of an object file (all but its
// trailer) through buf (nil: one is made), and reads the CRC-32C its trailer stores.
func objectFileCRC(r io.ReaderAt, body int64, buf []byte) (crc, stored uint32, err error) {
	if len(buf) == 0 {
		buf = make([]byte, min(body, 1<<20))
	}
	for off := int64(0); off < body; {
		n := min(int64(len(buf)), body-off)
		if err := readFull(r, buf[:n], off); err != nil {
			return 0, 0, fmt.Errorf("read object for its checksum: %w", err)
		}
		crc = crc32.Update(crc, castagnoli, buf[:n])
		off += n
	}
	var trailer [objectTrailerLen]byte
	if err := readFull(r, trailer[:], body); err != nil {
		return 0, 0, fmt.Errorf("read object checksum: %w", err)
	}
	return crc, binary.LittleEndian.Uint32(trailer[:]), nil
}

// checkCRC verifies the CRC-32C of a whole object file.
func checkCRC(f ObjectFile) error {
	size := f.Size()
	if size < objectTrailerLen {
		return fmt.Errorf("object file of %d bytes: %w", size, ErrCorrupt)
	}
	crc, want, err := objectFileCRC(f, size-objectTrailerLen, nil)
	if err != nil {
		return err
	}
	if crc != want {
		return recordDamage(f, fmt.Errorf("CRC-32C %08x, stored %08x: %w", crc, want, ErrCorrupt))
	}
	return nil
}

// ensureCRC checks the CRC of object id once per process (random-access reads of a full
// object then trust the file plus each frame's own checksum).
func (o *objectStore) ensureCRC(id ID, f ObjectFile) error {
	if o.crcChecked.has(id) {
		return nil
	}
	if err := checkCRC(f); err != nil {
		return objectError(id, err)
	}
	o.crcChecked.add(id)
	return nil
}

// forgetCopy drops what was read of id's file (header, delta section, CRC checked): a damaged
// record of it failed, and another copy serves it now (pack_copies.go).
func (o *objectStore) forgetCopy(id ID) {
	o.objInfos.remove(id)
	o.deltas.remove(id)
	o.crcChecked.remove(id)
}

// readChunk decompresses chunk i of full object id into dst (exactly the chunk's length).
func (o *objectStore) readChunk(id ID, i int, dst []byte) error {
	f, info, err := o.openObject(id)
	if err != nil {
		return err
	}
	defer f.Close()
	if info.hdr.Kind != kindFull {
		return errStale
	}
	if err := o.ensureCRC(id, f); err != nil {
		if errors.Is(err, errOtherCopy) {
			// A damaged record: another copy serves the object now (pack_copies.go).
			o.forgetCopy(id)
			return o.readChunk(id, i, dst)
		}
		return err
	}
	if i < 0 || i >= info.table.Count() || int64(len(dst)) != info.table.ChunkLen(i, info.hdr.ContentLen) {
		return objectError(id, fmt.Errorf("chunk %d of %d bytes out of range", i, len(dst)))
	}
	frame := make([]byte, info.table.Offsets[i+1]-info.table.Offsets[i])
	if err := readFull(f, frame, info.table.Offsets[i]); err != nil {
		return objectError(id, fmt.Errorf("read chunk %d: %w", i, err))
	}
	scratch := o.chunkScratch.Get().(*[]byte)
	defer o.chunkScratch.Put(scratch)
	*scratch, err = o.st.codec.decompressChunk(dst, frame, *scratch, info.hdr.Width)
	if err != nil {
		return objectError(id, fmt.Errorf("chunk %d: %w", i, err))
	}
	return nil
}

// deltaObject is the loaded delta section of an object: a delta from base to the object.
type deltaObject struct {
	hdr    objectHeader
	body   []byte
	info   delta.DeltaInfo
	parsed *delta.Delta // body's framing, checked, with its blocks located
	// chain counts the version-2 sections from this one down its context chain (this one,
	// its base's, ...): 0 for a version-1 section (object_delta_context.go).
	chain int
	// context returns block b of the decoded delta section of hdr.Base, the context of a
	// version-2 section, holding a reference to it (nil for a version-1 section); path holds
	// the sections whose decodes wait on it, this one last (object_delta_context.go).
	context func(b int64, path []ID) (*cachedBlock, error)
}

// loadDelta returns the delta section of object id (a delta object, or a full object's link)
// after checking the object file's CRC, validated against the header. A delta object is read
// whole; of a full object only the link is kept (its CRC check streams). Bodies are cached.
// A version-2 section is returned only when its context (the delta section of its base) loads
// too, and its chain of contexts is at most maxContextRead long: else ErrCorrupt (object_delta_context.go).
func (o *objectStore) loadDelta(id ID) (*deltaObject, error) { return o.loadDeltaAt(id, nil) }

// loadDeltaAt is loadDelta for a section of a chain of contexts being loaded: path holds the
// sections whose loads led to it, each the context of the one before.
func (o *objectStore) loadDeltaAt(id ID, path []ID) (*deltaObject, error) {
	if d, ok := o.deltas.get(id); ok {
		return d, nil
	}
	o.deltaReads.Add(1)
	epoch := o.fillEpoch()
	if hdr, body, ok := o.readKnownDelta(id); ok {
		return o.openDeltaSection(id, epoch, hdr, body, path)
	}
	f, info, err := o.openObject(id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hdr := info.hdr
	if !hdr.HasDelta() {
		return nil, errStale
	}
	var body []byte
	if hdr.Kind == kindDelta {
		file := make([]byte, f.Size())
		if err := readFull(f, file, 0); err != nil {
			return nil, objectError(id, err)
		}
		stored := binary.LittleEndian.Uint32(file[len(file)-objectTrailerLen:])
		if crc := crc32c(file[:len(file)-objectTrailerLen]); crc != stored {
			err := recordDamage(f, fmt.Errorf("CRC-32C %08x, stored %08x: %w", crc, stored, ErrCorrupt))
			if errors.Is(err, errOtherCopy) {
				// A damaged record: another copy serves the object now (pack_copies.go).
				o.forgetCopy(id)
				return o.loadDeltaAt(id, path)
			}
			return nil, objectError(id, err)
		}
		o.crcChecked.add(id)
		body = file[hdr.DeltaOffset() : hdr.DeltaOffset()+hdr.DeltaLen]
	} else {
		if err := o.ensureCRC(id, f); err != nil {
			if errors.Is(err, errOtherCopy) {
				o.forgetCopy(id)
				return o.loadDeltaAt(id, path)
			}
			return nil, err
		}
		body = make([]byte, hdr.DeltaLen)
		if err := readFull(f, body, hdr.DeltaOffset()); err != nil {
			return nil, objectError(id, fmt.Errorf("read link: %w", err))
		}
	}
	return o.openDeltaSection(id, epoch, hdr, body, path)
}

// readKnownDelta reads delta object id whole in one read, when its header is cached
// (a catch-up's plan read it: copy_forward.go patchPlan), instead of reading the header
// again first. The record is checked as loadDeltaAt checks it (CRC-32C of the whole file)
// and its header, parsed from the bytes read, must name id and match the cached one; on
// any failure ok is false and loadDeltaAt reads the object the ordinary way, which reports
// or routes around damage (recordDamage).
func (o *objectStore) readKnownDelta(id ID) (hdr objectHeader, body []byte, ok bool) {
	info, cached := o.objInfos.get(id)
	if !cached || info.hdr.Kind != kindDelta {
		return hdr, nil, false
	}
	f, err := o.st.be.OpenObject(id)
	if err != nil {
		return hdr, nil, false
	}
	defer f.Close()
	size := f.Size()
	if size != info.hdr.FileSize() || size < objectHeaderLen+objectTrailerLen {
		return hdr, nil, false
	}
	file := make([]byte, size)
	if readFull(f, file, 0) != nil {
		return hdr, nil, false
	}
	if crc32c(file[:size-objectTrailerLen]) != binary.LittleEndian.Uint32(file[size-objectTrailerLen:]) {
		return hdr, nil, false
	}
	hdr, err = parseObjectHeader(file[:objectHeaderLen], size)
	if err != nil || hdr.ID != id || hdr != info.hdr || !hdr.HasDelta() {
		return hdr, nil, false
	}
	o.crcChecked.add(id)
	return hdr, file[hdr.DeltaOffset() : hdr.DeltaOffset()+hdr.DeltaLen], true
}

// wroteDelta caches the header and the delta section of delta object id, whose file this
// process just wrote (file, as put): the seal's bring-forward of the copy (copy_forward.go)
// plans and applies every changed tensor's delta, and the next version's encoder codes each
// tensor against the section that led to its base (writeContextOf); read back from the
// pack, a MoE version's thousands of small records cost a header read, a record read and a
// CRC each (issue 29). Both writers call it: the batch path and the stream. The bytes are the ones the writer encoded and put; the copy they patch is
// checked against the sums of the bytes the writer hashed (copy_check.go). Nothing is
// cached when the file does not parse as a delta object of id.
func (o *objectStore) wroteDelta(id ID, file []byte) {
	if len(file) < objectHeaderLen+objectTrailerLen {
		return
	}
	epoch := o.fillEpoch()
	hdr, err := parseObjectHeader(file[:objectHeaderLen], int64(len(file)))
	if err != nil || hdr.ID != id || hdr.Kind != kindDelta || !hdr.HasDelta() {
		return
	}
	info := &objectInfo{hdr: hdr}
	o.cacheFill(epoch, func() { o.objInfos.add(id, info, 64) })
	o.openDeltaSection(id, epoch, hdr, file[hdr.DeltaOffset():hdr.DeltaOffset()+hdr.DeltaLen], nil) // an error: read back later
}

// openDeltaSection is the end of loadDeltaAt: body, the delta section of object id whose
// header is hdr, read and checked, is opened, checked against hdr and cached.
func (o *objectStore) openDeltaSection(id ID, epoch uint64, hdr objectHeader, body []byte, path []ID) (*deltaObject, error) {
	dd, err := delta.OpenDelta(body)
	if err != nil {
		return nil, objectError(id, fmt.Errorf("delta section: %v: %w", err, ErrCorrupt))
	}
	di := dd.Info()
	if di.Width != hdr.Width || di.Elements*int64(di.Width) != hdr.ContentLen {
		return nil, objectError(id, fmt.Errorf("delta of %d elements of %d bytes for %d content bytes of width %d: %w",
			di.Elements, di.Width, hdr.ContentLen, hdr.Width, ErrCorrupt))
	}
	d := &deltaObject{hdr: hdr, body: body, info: di, parsed: dd}
	if dd.NeedsContext() {
		if err := o.attachContext(id, d, path); err != nil {
			return nil, err
		}
	}
	o.cacheFill(epoch, func() { o.deltas.add(id, d, int64(len(body))+256) })
	if d.context != nil {
		// Walked again now that d is cached: of two loads of a cycle's sections that ran
		// at once, each before the other was cached, the later to be cached sees it.
		if err := o.contextCycle(hdr.Base, append(path[:len(path):len(path)], id)); err != nil {
			o.deltas.remove(id)
			return nil, objectError(id, err)
		}
	}
	return d, nil
}
