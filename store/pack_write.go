package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/weightfs/weightfs/store/pack"
)

// Writes of the pack layer. Small objects (under packSmallObject) are appended to the open
// pack, one per process, a temporary file of the backend; it is finished (table and footer,
// pack.Writer) and put (PutPack) once its records pass packTarget, and at every SyncObjects.
// A large object becomes a pack of its own: its temporary file gets the table and footer
// appended and is put as it is, without a copy. SyncObjects then writes one pack index for
// the packs put since the last one: a version costs one fsync per pack, the index, the
// manifest and their directories (docs/format.md Part I §3.5).

// openPack is the pack being written. Records are gathered in buf and written to f a
// packWriteBuf at a time: a version of a mixture of experts puts thousands of delta
// objects of a few KiB, and a write(2) each was a per-tensor cost (issue 29).
type openPack struct {
	f    *os.File
	w    *pack.Writer
	ents []pack.Entry // in the order written (w sorts its own at Finish)
	buf  []byte       // records not yet written to f, which start at file offset w.Offset()-len(buf)
}

// packWriteBuf is how many bytes of small records the open pack gathers before it writes them.
const packWriteBuf = 1 << 20

// flush writes the records gathered in buf to the pack's file. On an error they stay in
// buf (served from there, written at the next flush): a failed write loses no record put
// before it, as when every record was written on its own.
func (o *openPack) flush() error {
	if len(o.buf) == 0 {
		return nil
	}
	if _, err := o.f.WriteAt(o.buf, o.w.Offset()-int64(len(o.buf))); err != nil {
		return fmt.Errorf("write into pack: %w", err)
	}
	o.buf = o.buf[:0]
	return nil
}

// read returns the record of length bytes at off: from buf when it is there (records are
// gathered whole), else from f.
func (o *openPack) read(off, length int64) ([]byte, error) {
	b := make([]byte, length)
	if start := o.w.Offset() - int64(len(o.buf)); off >= start {
		copy(b, o.buf[off-start:])
		return b, nil
	}
	_, err := o.f.ReadAt(b, off)
	return b, err
}

// write puts the record file, which starts at off (w.Offset(), not yet added), into the
// pack: into buf, or straight to f when it does not fit.
func (o *openPack) write(file []byte, off int64) error {
	if len(o.buf)+len(file) > packWriteBuf {
		if err := o.flush(); err != nil {
			return err
		}
	}
	if len(file) >= packWriteBuf {
		_, err := o.f.WriteAt(file, off)
		return err
	}
	o.buf = append(o.buf, file...) // grows to packWriteBuf, then reused (packedObjects.spare)
	return nil
}

func (o *openPack) entries() []pack.Entry { return o.ents }

func (o *openPack) abort(be Backend) { be.RemoveTemp(o.f) }

// PutObject puts the object file tmp as object id: its bytes into the open pack when it is
// small (tmp is removed), or tmp itself as a pack of its own.
func (p *packedObjects) PutObject(id ID, tmp *os.File) error {
	if p.loose {
		return p.putLoose(id, tmp)
	}
	st, err := tmp.Stat()
	if err != nil {
		p.Backend.RemoveTemp(tmp)
		return fmt.Errorf("put object %s: %w", id, err)
	}
	if st.Size() >= packSmallObject {
		return p.putLarge(id, tmp, st.Size())
	}
	b := make([]byte, st.Size())
	_, err = io.ReadFull(io.NewSectionReader(tmp, 0, st.Size()), b)
	p.Backend.RemoveTemp(tmp)
	if err != nil {
		return fmt.Errorf("put object %s: read its temporary file: %w", id, err)
	}
	return p.putObjectBytes(id, b)
}

// putObjectBytes appends the object file held in memory to the open pack, with no temporary
// file of its own.
func (p *packedObjects) putObjectBytes(id ID, file []byte) error {
	if p.loose {
		f, err := p.Backend.CreateTemp()
		if err != nil {
			return err
		}
		if _, err := f.Write(file); err != nil {
			p.Backend.RemoveTemp(f)
			return fmt.Errorf("write object %s: %w", id, err)
		}
		return p.putLoose(id, f)
	}
	if len(file) < pack.MinRecordLen {
		return fmt.Errorf("put object %s: a file of %d bytes, shorter than an object file", id, len(file))
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.open != nil && p.open.w.Has(id) {
		// The id is in the open pack already (gc re-anchors it): a pack's table holds one
		// record per id, so the open pack is finished first.
		if err := p.finishOpenLocked(); err != nil {
			return err
		}
	}
	if p.open == nil {
		f, err := p.Backend.CreateTemp()
		if err != nil {
			return err
		}
		p.open = &openPack{f: f, w: pack.NewWriter(f), buf: p.spare[:0]}
		p.spare = nil
	}
	o := p.open
	off := o.w.Offset()
	if err := o.write(file, off); err != nil {
		return fmt.Errorf("put object %s: write into pack: %w", id, err)
	}
	e := pack.Entry{ID: id, Offset: off, Length: int64(len(file)), CRC: binary.LittleEndian.Uint32(file[len(file)-4:])}
	p.mu.Lock()
	o.w.Added(e.ID, e.Length, e.CRC)
	o.ents = append(o.ents, e)
	p.loc[id] = packedLoc{pack: openPackNo, offset: off, length: e.Length}
	delete(p.dead, id)
	p.mu.Unlock()
	if o.w.Offset() >= packTarget {
		return p.finishOpenLocked()
	}
	return nil
}

// putLarge makes tmp, an object file of size bytes, a pack of its own: the table and footer
// are appended to it.
func (p *packedObjects) putLarge(id ID, tmp *os.File, size int64) error {
	var crc [4]byte
	if _, err := tmp.ReadAt(crc[:], size-4); err != nil {
		p.Backend.RemoveTemp(tmp)
		return fmt.Errorf("put object %s: %w", id, err)
	}
	e := pack.Entry{ID: id, Offset: 0, Length: size, CRC: binary.LittleEndian.Uint32(crc[:])}
	entries := []pack.Entry{e}
	t := pack.Trailer(entries)
	if _, err := tmp.WriteAt(t, size); err != nil {
		p.Backend.RemoveTemp(tmp)
		return fmt.Errorf("put object %s: write its pack table: %w", id, err)
	}
	ip := pack.IndexedPack{ID: pack.IDOfTrailer(t), Size: size + int64(len(t)), Entries: entries}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.packs.PutPack(ip.ID, tmp); err != nil {
		return fmt.Errorf("put object %s: %w", id, err)
	}
	p.mu.Lock()
	p.written = append(p.written, ip)
	p.addPackLocked(ip, 0)
	delete(p.dead, id)
	p.mu.Unlock()
	return nil
}

// finishOpenLocked finishes the open pack and puts it; its records are then found in it. On
// an error the pack is dropped and its objects with it (they were in no sealed version: the
// seal that asked fails and is tried again). wmu is held.
func (p *packedObjects) finishOpenLocked() error {
	o := p.open
	if o == nil {
		return nil
	}
	p.open = nil
	err := o.flush()
	p.spare, o.buf = o.buf, nil
	var id ID
	var size int64
	var entries []pack.Entry
	if err == nil {
		id, size, entries, err = o.w.Finish()
	}
	if err == nil {
		err = p.packs.PutPack(id, o.f) // takes o.f, also on an error
	} else {
		o.abort(p.Backend)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		for _, e := range o.ents {
			if l, ok := p.loc[e.ID]; ok && l.pack == openPackNo {
				delete(p.loc, e.ID)
			}
		}
		return fmt.Errorf("put pack: %w", err)
	}
	ip := pack.IndexedPack{ID: id, Size: size, Entries: entries}
	p.written = append(p.written, ip)
	p.addPackLocked(ip, 0)
	return nil
}

// SyncObjects finishes the open pack, makes every pack and loose object put so far durable
// (the wrapped backend's SyncObjects), then writes one pack index of the packs put since the
// last one, durably. Its name is kept for the seal (syncIndexes).
func (p *packedObjects) SyncObjects() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.syncLocked()
}

// syncLocked is SyncObjects under wmu.
func (p *packedObjects) syncLocked() error {
	if err := p.finishOpenLocked(); err != nil {
		return err
	}
	if err := p.Backend.SyncObjects(); err != nil {
		return err
	}
	if len(p.written) == 0 {
		return nil
	}
	x := namedIndex{Index: &pack.Index{Seq: p.nextSeq(), Packs: p.written}}
	b := x.Encode()
	x.Name = pack.Name(x.Seq, b)
	if err := p.records.PutRecord(RecordIndex, x.Name, b); err != nil {
		return fmt.Errorf("write pack index: %w", err)
	}
	p.mu.Lock()
	p.written = nil
	p.loaded = append(p.loaded, x)
	p.addIndexLocked(x)
	p.overlayOwnLocked()
	p.mu.Unlock()
	p.unsealed = append(p.unsealed, x.Name)
	return nil
}

// putObjectBytes writes a whole object file held in memory as object id: into the open pack
// where the store has packs, else through a temporary file.
func putObjectBytes(be Backend, id ID, file []byte) error {
	if p := packLayerOf(be); p != nil {
		return p.putObjectBytes(id, file)
	}
	f, err := be.CreateTemp()
	if err != nil {
		return err
	}
	if _, err := f.Write(file); err != nil {
		be.RemoveTemp(f)
		return fmt.Errorf("write object %s: %w", id, err)
	}
	return be.PutObject(id, f)
}

// packLayerOf is the pack layer be is or holds (nil: none).
func packLayerOf(be Backend) *packedObjects {
	switch b := be.(type) {
	case *packedObjects:
		return b
	case *backendCaps:
		// The layer only while it is what the store calls (a test may put a backend of its
		// own in front: then its PutObject is called).
		if p, ok := b.Backend.(*packedObjects); ok {
			return p
		}
	}
	return nil
}

// errNoPack says a pack an index names is not in the store.
var errNoPack = errors.New("pack missing")

// putLoose puts tmp as a loose object of the wrapped backend (the loose knob). The object is
// no longer dead, and a packed copy of it is shadowed by the loose one only where the layer
// looks loose objects up first: it does not, so the id is taken off the location map.
func (p *packedObjects) putLoose(id ID, tmp *os.File) error {
	if err := p.Backend.PutObject(id, tmp); err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.loc, id)
	delete(p.dead, id)
	p.mu.Unlock()
	return nil
}
