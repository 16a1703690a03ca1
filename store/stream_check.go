package store

import (
	"bytes"
	"fmt"
)

// The check of the base bytes a stream diffs against (docs/design.md, "Checking the base
// bytes"). A delta computed against damaged bytes would be a wrong object forever, so every
// base byte a stream uses must be checked. Bytes read from the materialized copy already are:
// every read of the copy checks the whole 64 KiB chunks under it against the sums of the
// file's content, computed from bytes whose SHA-256 was checked in the same pass, and the
// copy's composition (where each object lies in its file) is vouched for before the copy is
// used (copy_sums.go, copy_read.go). Hashing them again (a CRC-32C of the base's content, or
// its SHA-256 after a restart) checked the same bytes twice: a tenth of ingest's CPU, a third
// SHA-256 pass after a restart. So a stream hashes base bytes only once some of them come
// from elsewhere, through the store's read path (the copy moved on to a newer version, or
// failed its check): from that read on, and for the bytes before it read again from the
// objects, it hashes the whole base and compares it with the base's identity, as before.

// streamBaseCheck checks the base bytes of one tensor, read in order.
type streamBaseCheck struct {
	m    *materialized
	base ID
	hb   *baseCheck // nil while every byte came from a checked read of the copy
	end  int64      // bytes [0, end) were read
}

func newStreamBaseCheck(m *materialized, base ID) *streamBaseCheck {
	return &streamBaseCheck{m: m, base: base}
}

// add takes base bytes [off, off+len(b)), read after the bytes before them; checked says they
// came from a checked read of the copy. The first bytes that did not start the hash: those
// before them are read again from the objects (catchUp) and hashed first.
func (c *streamBaseCheck) add(b []byte, off int64, checked bool, catchUp func(off, n int64, p []byte) error) error {
	if off != c.end {
		return fmt.Errorf("base check: bytes at %d after %d", off, c.end)
	}
	if c.hb == nil && !checked {
		hb := newBaseCheck(c.m, c.base)
		buf := make([]byte, min(off, ingestChunk))
		for at := int64(0); at < off; at += ingestChunk {
			n := min(ingestChunk, off-at)
			if err := catchUp(at, n, buf[:n]); err != nil {
				return err
			}
			hb.Write(buf[:n])
		}
		c.hb = hb
	}
	if c.hb != nil {
		c.hb.Write(b)
	}
	c.end = off + int64(len(b))
	return nil
}

// matches reports whether the bytes read (the whole base) are the base's content: true when
// every one was checked by the copy, else their hash must be the base's.
func (c *streamBaseCheck) matches() bool {
	return c.hb == nil || c.hb.matches(c.base)
}

// sameAs reports whether the bytes [0, end) read again, checked by again (made by c.again),
// are those read first. known is false when that cannot be said: every byte read first was
// checked by the copy, and some read again were not (they are hashed): the caller then
// checks the whole base read again against its identity instead.
func (c *streamBaseCheck) sameAs(again *streamBaseCheck) (same, known bool) {
	switch {
	case c.hb == nil && again.hb == nil:
		return true, true // both the base's content, as the copy's checks say
	case c.hb != nil:
		return bytes.Equal(c.hb.Sum(nil), again.hb.Sum(nil)), true
	}
	return false, false
}

// again is an empty check of the same base for reading its bytes a second time: hashing from
// the start, the same way, when this one hashes (so that the two can be compared).
func (c *streamBaseCheck) again() *streamBaseCheck {
	a := newStreamBaseCheck(c.m, c.base)
	if c.hb != nil {
		a.hb = &baseCheck{Hash: c.hb.fresh(), crc: c.hb.crc, useCRC: c.hb.useCRC, xxh: c.hb.xxh, useXXH: c.hb.useXXH}
	}
	return a
}
