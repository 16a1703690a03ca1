package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
)

// Reads of the pack layer. A packed object opens as its record's section of its pack (packs
// are opened once and kept open, a few at a time: packFiles); a record of the pack being
// written is read into memory (it is small, and the pack's file is handed to the backend when
// it is finished). Anything else is a loose object of the wrapped backend.
//
// A pack that is missing, or an object not found at all, makes the layer read the store's
// indexes again once (another process sealed a version, or gc rewrote packs and
// consolidated the indexes) before it says so; a pack an index names that stays missing is
// damage (ErrCorrupt), never fs.ErrNotExist: the object exists, its bytes are lost.

// OpenObject opens object id: its record in a pack, or its loose file.
func (p *packedObjects) OpenObject(id ID) (ObjectFile, error) {
	f, err := p.openObject(id)
	if err == nil || !(errors.Is(err, errNoPack) || errors.Is(err, fs.ErrNotExist)) {
		return f, err
	}
	if p.isDead(id) {
		return nil, fmt.Errorf("open object %s: %w", id, fs.ErrNotExist)
	}
	if rerr := p.reload(); rerr != nil {
		return nil, errors.Join(err, rerr)
	}
	f, err = p.openObject(id)
	if errors.Is(err, errNoPack) {
		return nil, fmt.Errorf("%w: %w", err, ErrCorrupt)
	}
	return f, err
}

func (p *packedObjects) openObject(id ID) (ObjectFile, error) {
	loc, open, ok := p.lookup(id)
	switch {
	case ok && open:
		return p.readOpen(id)
	case ok:
		if p.knownBad(loc) {
			// Found damaged before: another copy, if one is intact (pack_copies.go).
			return p.openCopy(id, loc, nil)
		}
		f, err := p.files.section(id, loc)
		if errors.Is(err, ErrCorrupt) && p.noteDamaged(id, loc, err) {
			return p.openCopy(id, loc, err)
		}
		return f, err
	case p.isDead(id):
		return nil, fmt.Errorf("open object %s: %w", id, fs.ErrNotExist)
	}
	return p.Backend.OpenObject(id)
}

// readOpen reads the record of id in the pack being written into memory.
func (p *packedObjects) readOpen(id ID) (ObjectFile, error) {
	p.wmu.Lock()
	loc, open, ok := p.lookup(id)
	if !ok || !open {
		// Finished (or dropped) meanwhile.
		p.wmu.Unlock()
		return p.openObject(id)
	}
	b, err := p.open.read(loc.Offset, loc.Length)
	p.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("open object %s: read the pack being written: %w", id, err)
	}
	return heldObject{bytes.NewReader(b)}, nil
}

// heldObject is an object file held in memory.
type heldObject struct{ *bytes.Reader }

func (m heldObject) Close() error { return nil }

// packFiles keeps up to max packs open for reads; a section holds its pack open until it is
// closed.
type packFiles struct {
	be  PackBackend
	max int
	// onDamage is told of a record that failed a reader's checks (the pack layer's
	// noteDamaged): it says whether another copy of the object serves it.
	onDamage func(id ID, loc packLocation, err error) bool

	mu    sync.Mutex
	open  map[ID]*packFile
	clock uint64
}

type packFile struct {
	f       ObjectFile
	refs    int
	used    uint64
	evicted bool
}

func newPackFiles(be PackBackend, max int) *packFiles {
	return &packFiles{be: be, max: max, open: map[ID]*packFile{}}
}

// section opens the record of id at loc.
func (c *packFiles) section(id ID, loc packLocation) (ObjectFile, error) {
	c.mu.Lock()
	pf, ok := c.open[loc.Pack]
	c.clock++
	if ok {
		pf.refs++
		pf.used = c.clock
		c.mu.Unlock()
	} else {
		c.mu.Unlock()
		f, err := c.be.OpenPack(loc.Pack)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("object %s: its pack %s is missing: %w", id, loc.Pack, errNoPack)
		}
		if err != nil {
			return nil, fmt.Errorf("object %s in pack %s: %w", id, loc.Pack, err)
		}
		c.mu.Lock()
		if other, ok := c.open[loc.Pack]; ok {
			f.Close() // opened twice meanwhile
			pf = other
			pf.refs++
			pf.used = c.clock
		} else {
			// Held and newest before the eviction looks: it never closes the pack it opens.
			pf = &packFile{f: f, refs: 1, used: c.clock}
			c.open[loc.Pack] = pf
			c.evictLocked()
		}
		c.mu.Unlock()
	}
	if loc.Offset+loc.Length > pf.f.Size() {
		c.release(pf)
		return nil, fmt.Errorf("object %s: its record [%d, %d) lies beyond the end of pack %s (%d bytes): %w",
			id, loc.Offset, loc.Offset+loc.Length, loc.Pack, pf.f.Size(), ErrCorrupt)
	}
	return &packSection{c: c, pf: pf, id: id, loc: loc}, nil
}

// evictLocked closes the least recently used packs beyond max (those still read close when
// their last section does).
func (c *packFiles) evictLocked() {
	for len(c.open) > c.max {
		var oldest ID
		var at uint64
		first := true
		for id, pf := range c.open {
			if first || pf.used < at {
				oldest, at, first = id, pf.used, false
			}
		}
		pf := c.open[oldest]
		delete(c.open, oldest)
		pf.evicted = true
		if pf.refs == 0 {
			pf.f.Close()
		}
	}
}

func (c *packFiles) release(pf *packFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pf.refs--
	if pf.refs == 0 && pf.evicted {
		pf.f.Close()
	}
}

func (c *packFiles) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, pf := range c.open {
		delete(c.open, id)
		pf.evicted = true
		if pf.refs == 0 {
			pf.f.Close()
		}
	}
}

// packSection is an object's record in an open pack: an ObjectFile of the record's length.
type packSection struct {
	c    *packFiles
	pf   *packFile
	id   ID
	loc  packLocation
	once sync.Once
}

func (s *packSection) Size() int64 { return s.loc.Length }

func (s *packSection) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read object %s at %d: negative offset", s.id, off)
	}
	if off >= s.loc.Length {
		return 0, io.EOF
	}
	short := false
	if rest := s.loc.Length - off; int64(len(b)) > rest {
		b, short = b[:rest], true
	}
	n, err := s.pf.f.ReadAt(b, s.loc.Offset+off)
	if err == nil && short {
		err = io.EOF
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("read pack %s: %w", s.loc.Pack, err)
	}
	return n, err
}

func (s *packSection) Close() error {
	s.once.Do(func() { s.c.release(s.pf) })
	return nil
}

// where names the pack and offset of the record, for messages about its damage.
func (s *packSection) where() string {
	return fmt.Sprintf("in pack %s at offset %d", s.loc.Pack, s.loc.Offset)
}

// objectFileWhere says where an object file's bytes are, for messages about its damage:
// " (in pack P at offset O)" for a packed object, "" for a loose one.
func objectFileWhere(f ObjectFile) string {
	if w, ok := f.(interface{ where() string }); ok {
		return " (" + w.where() + ")"
	}
	return ""
}
