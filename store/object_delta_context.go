package store

import (
	"errors"
	"fmt"
	"slices"

	"github.com/weightfs/weightfs/delta"
)

// Contexts of version-2 delta sections (docs/format.md Part I §3.3; design.md, "The delta
// codec"). A version-2 body is coded against the decoded delta that led to its base: the delta
// section of the object's base object (the base's body when the base is a delta object, its
// link when it is a full object with one). Block b of the section decodes with block b of that
// context, which the block cache (read_blocks.go) holds like any other decoded block, so a
// replay that walks a chain decodes each context once; the context may itself be version 2,
// and its context is decoded in turn: the chain of contexts. Writers bound it
// (maxContextChain); readers refuse one longer than maxContextRead as damage.

const (
	// maxContextChain is the most version-2 sections a context chain holds: a new delta section
	// is written as version 2 only when its base's section starts a chain of fewer, so a cold
	// decode of any block decodes at most this many blocks of other sections besides its own.
	// docs/design.md ("The delta codec") has the measurement that chose it.
	maxContextChain = 4
	// maxContextRead is the longest chain of contexts a reader follows; a longer one (or a
	// cycle of bases, which only damage makes) is ErrCorrupt.
	maxContextRead = 64
)

// attachContext gives the version-2 section d of object id its context: the delta section of
// its base, loaded (so a missing or damaged context is found when the section is, as
// ErrCorrupt naming both objects). path holds the sections whose loads led to this one (each
// the context of the one before). A chain of contexts that comes back to a section on it (a
// cycle of bases, which only forged or damaged files make: the CRC-32C is no MAC), through
// the files or through sections cached before the files changed, or that is longer than
// maxContextRead, is ErrCorrupt here, before any decode could wait on itself.
func (o *objectStore) attachContext(id ID, d *deltaObject, path []ID) error {
	base := d.hdr.Base
	path = append(path[:len(path):len(path)], id)
	if len(path) > maxContextRead {
		return objectError(id, fmt.Errorf("chain of delta contexts longer than %d: %w", maxContextRead, ErrCorrupt))
	}
	if err := o.contextCycle(base, path); err != nil {
		return objectError(id, err)
	}
	bd, err := o.loadDeltaAt(base, path)
	if err != nil {
		return contextError(id, base, err)
	}
	if bd.info.Width != d.info.Width || bd.info.Elements != d.info.Elements {
		return contextError(id, base, fmt.Errorf("context of %d elements of %d bytes for a delta of %d of %d: %w",
			bd.info.Elements, bd.info.Width, d.info.Elements, d.info.Width, ErrCorrupt))
	}
	d.chain = bd.chain + 1
	d.context = func(b int64, path []ID) (*cachedBlock, error) { return o.contextBlock(id, base, b, path) }
	return nil
}

// contextCycle walks the chain of contexts from base as far as the sections cached now know
// it, and fails with ErrCorrupt when it comes back to a section on path or runs longer than
// maxContextRead (a section not cached ends the walk: its own load walks on from it).
func (o *objectStore) contextCycle(base ID, path []ID) error {
	cur := base
	for n := len(path); ; n++ {
		if slices.Contains(path, cur) {
			return fmt.Errorf("its chain of delta contexts comes back to object %s (a cycle of bases): %w", cur, ErrCorrupt)
		}
		if n >= maxContextRead {
			return fmt.Errorf("chain of delta contexts longer than %d: %w", maxContextRead, ErrCorrupt)
		}
		d, ok := o.deltas.get(cur)
		if !ok || d.context == nil {
			return nil
		}
		cur = d.hdr.Base
	}
}

// errContextCycle is the error of a decode of block b of object id that needs, through the
// contexts in path, a block of id again.
func errContextCycle(id ID, b int64, path []ID) error {
	return objectError(id, fmt.Errorf("block %d decodes against itself through %d delta contexts (a cycle of bases): %w", b, len(path), ErrCorrupt))
}

// contextBlock returns block b of the decoded delta section of base, the context of object
// id's section, with a reference the caller releases; path holds the sections whose decodes
// wait on this one (id last).
func (o *objectStore) contextBlock(id, base ID, b int64, path []ID) (*cachedBlock, error) {
	cb, err := o.sectionBlock(base, nil, b, path)
	if err != nil {
		return nil, contextError(id, base, err)
	}
	return cb, nil
}

// sectionBlock returns block b of the decoded delta section of object id (d: the section as
// loaded, nil to load it), with a reference the caller releases; path holds the sections
// whose decodes wait on this one (nil: none). A section loaded before gc rewrote the object
// (whose own context gc dropped; the rewritten section decodes to the same changes) is
// dropped and loaded again once.
func (o *objectStore) sectionBlock(id ID, d *deltaObject, b int64, path []ID) (*cachedBlock, error) {
	var err error
	for try := 0; try < 2; try++ {
		if d == nil {
			d, err = o.loadDelta(id)
		}
		if err == nil {
			var cb *cachedBlock
			if cb, err = o.decodedBlockOn(id, d, b, path); err == nil {
				return cb, nil
			}
		}
		if !isContextDamage(err) {
			break
		}
		o.deltas.remove(id)
		o.objInfos.remove(id)
		d = nil
	}
	return nil, err
}

// isContextDamage reports whether err says that a context is damaged or missing (rather
// than a failed request or a closed store): isDamage, or a base without a delta section.
func isContextDamage(err error) bool { return isDamage(err) || errors.Is(err, errStale) }

// contextError is the error of object id whose context, the delta section of base, failed
// with err: damage of the context is damage of id (ErrCorrupt, never "not found": the reads
// of id fail with EIO), other failures pass through.
func contextError(id, base ID, err error) error {
	if isContextDamage(err) {
		// (The cause is kept in the chain: an I/O error under it is no verdict of damage.)
		return objectError(id, &contextFailure{base, fmt.Errorf("its delta context, the delta section of object %s: %w: %w", base, err, ErrCorrupt)})
	}
	return objectError(id, &contextFailure{base, fmt.Errorf("its delta context, the delta section of object %s: %w", base, err)})
}

// contextFailure is the failure of an object's context: of its base's section, not of its
// own file (Verify reports it with the base, or with the versions read through it).
type contextFailure struct {
	base ID
	err  error
}

func (e *contextFailure) Error() string { return e.err.Error() }
func (e *contextFailure) Unwrap() error { return e.err }

// contextHold hands out the blocks of a section's context as a delta.ContextFunc and keeps
// the references it took until release (after the decode or apply that used them).
type contextHold struct {
	held []*cachedBlock
	err  error // the first failure, with its cause (the codec reports its own)
	path []ID  // the sections whose decodes wait on the blocks handed out, the section's last
}

// fn returns the ContextFunc of d's context for one call (nil for a version-1 section).
func (h *contextHold) fn(d *deltaObject) delta.ContextFunc {
	if d.context == nil {
		return nil
	}
	return h.from(func(b int64) (*cachedBlock, error) { return d.context(b, h.path) })
}

// from returns a ContextFunc taking its blocks from blocks.
func (h *contextHold) from(blocks func(b int64) (*cachedBlock, error)) delta.ContextFunc {
	return func(b int64) (*delta.DecodedBlock, error) {
		cb, err := blocks(b)
		if err != nil {
			if h.err == nil {
				h.err = err
			}
			return nil, err
		}
		h.held = append(h.held, cb)
		return cb.db, nil
	}
}

// release gives back the references taken.
func (h *contextHold) release() {
	for _, cb := range h.held {
		cb.release()
	}
	h.held = h.held[:0]
}

// apply applies the changes of section d falling in elements [first, first+len(dst)/width)
// to dst in the direction dir, decoding a version-2 section against its context.
func (d *deltaObject) apply(id ID, dst []byte, first int64, dir delta.Direction) error {
	h := contextHold{path: []ID{id}}
	defer h.release()
	err := delta.ApplyDeltaContext(d.body, h.fn(d), dst, first, dir)
	if err != nil && h.err != nil {
		return h.err
	}
	if err != nil {
		return objectError(id, fmt.Errorf("apply delta: %v: %w", err, ErrCorrupt))
	}
	return nil
}

// writeContext is what a writer codes a new delta section against: the delta section of the
// new object's base, decoded block by block through the block cache. It is used by one
// goroutine at a time and holds at most one block, the one the encoder asked for last.
type writeContext struct {
	s    *objectStore
	base ID
	d    *deltaObject
	last *cachedBlock
}

// writeContextOf returns the context for a new delta from base, or nil when the new section
// is to be version 1: the base has no delta section, its chain of contexts already holds
// maxContextChain version-2 sections, or its section cannot be loaded (then the reads of the
// base fail too, and the new section must not depend on it; logged).
func (o *objectStore) writeContextOf(base ID) *writeContext {
	if o.contextChain <= 0 {
		return nil
	}
	m, err := o.meta(base)
	if err != nil || m.DeltaLen == 0 {
		return nil
	}
	d, err := o.loadDelta(base)
	if err != nil {
		o.log.Warn("delta written without context: the base's delta section does not load", "base", base, "err", err)
		return nil
	}
	if d.chain >= o.contextChain {
		return nil
	}
	return &writeContext{s: o, base: base, d: d}
}

// fn is the ContextFunc to give the encoder (nil for a nil context: version 1).
func (c *writeContext) fn() delta.ContextFunc {
	if c == nil {
		return nil
	}
	return c.block
}

// block returns block b of the context, releasing the one before: the encoder uses a context
// block only while it codes that block (delta.ContextFunc).
func (c *writeContext) block(b int64) (*delta.DecodedBlock, error) {
	cb, err := c.s.sectionBlock(c.base, c.d, b, nil)
	if err != nil {
		return nil, err
	}
	c.done()
	c.last = cb
	return cb.db, nil
}

// done releases the block held; the context stays usable (a later call takes another).
func (c *writeContext) done() {
	if c != nil && c.last != nil {
		c.last.release()
		c.last = nil
	}
}

// apply applies body, a section the writer coded against this context (nil: version 1), to
// dst as delta.ApplyDeltaContext does.
func (c *writeContext) apply(body, dst []byte, first int64, dir delta.Direction) error {
	if c == nil {
		return delta.ApplyDelta(body, dst, first, dir)
	}
	var h contextHold
	defer h.release()
	err := delta.ApplyDeltaContext(body, h.from(func(b int64) (*cachedBlock, error) {
		return c.s.sectionBlock(c.base, c.d, b, nil)
	}), dst, first, dir)
	if err != nil && h.err != nil {
		return h.err
	}
	return err
}

// upgradeFormat settles what delta sections the store writes: version 2 in a store of format
// 2, which a writer makes of a store of format 1 by rewriting its format file first (older
// programs then refuse the store instead of reading its new sections as damage; format.go);
// version 1 only in a store of format 1 that is not upgraded (a reader, a rank of a writer
// group: they write no format file).
func (s *Store) upgradeFormat(o Opening) error {
	s.format = max(o.Format, oldestFormat)
	// What a writer upgrades to: format 3 (objects in packs), or format 2 where the store
	// keeps loose objects (Options.looseObjects).
	target := uint32(storeFormatVersion)
	if s.opts.looseObjects {
		target = 2
	}
	if s.format >= target {
		return nil
	}
	if s.readOnly || o.UpgradeFormat == nil {
		if s.format < 2 {
			s.objects.writeVersion1Deltas()
		}
		return nil
	}
	if err := o.UpgradeFormat(encodeFormatVersion(target)); err != nil {
		return fmt.Errorf("open store %s: upgrade its format file to format %d: %w", o.Root, target, err)
	}
	from := s.format
	s.format = target
	s.log.Info(fmt.Sprintf("store format upgraded from %d to %d (%s); programs that read only format %d refuse it now", from, target, formatNews(from, target), from), "store", o.Root)
	return nil
}

// formatNews says what an upgrade of the store's format from one version to another allows.
func formatNews(from, to uint32) string {
	switch {
	case from < 2 && to >= 3:
		return "version-2 delta sections, objects in packs"
	case to >= 3:
		return "objects in packs"
	}
	return "version-2 delta sections"
}
