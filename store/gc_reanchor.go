package store

import (
	"fmt"

	"github.com/weightfs/weightfs/delta"
)

// What gc does for the contexts of version-2 delta sections (object_delta_context.go; docs/format.md
// Part I §5): a section coded against the delta section of its base needs that section for
// as long as it is kept, and an open writer may be coding a new section against the section
// of any object of the latest version. So gc never drops a delta section of a kept object:
// a delta object it re-anchors (its base goes) becomes a whole copy that keeps the section as
// its link, and a full object whose link is version 2 and coded against a context that goes
// (its base's section) is rewritten with the same link. Either link is written in version 1:
// the same changes, so it decodes to the same context (the codec checks each context block's
// change count and checksum), and it needs no context itself. A version-1 section is kept
// byte for byte.

// sectionIsV2 reports whether object id has a delta section of version 2, from the section's
// version byte alone (the section itself is checked when it is used).
func (c *collector) sectionIsV2(id ID) (bool, error) {
	f, info, err := c.st.objects.openObject(id)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if !info.hdr.HasDelta() {
		return false, nil
	}
	var head [5]byte // "WFSD" and the version (docs/format.md Part II)
	if info.hdr.DeltaLen < int64(len(head)) {
		return false, objectError(id, fmt.Errorf("delta section of %d bytes: %w", info.hdr.DeltaLen, ErrCorrupt))
	}
	if err := readFull(f, head[:], info.hdr.DeltaOffset()); err != nil {
		return false, objectError(id, err)
	}
	return head[4] >= 2, nil
}

// reanchor rewrites object id (a delta object, or a full object with a link) as a whole copy
// of the same content (checked against its SHA-256 before it replaces the object) whose link
// is the object's delta section in version 1 (byte for byte when it is version 1 already).
func (c *collector) reanchor(id ID, hint objHint, m objMeta) error {
	fw, err := newFullWriter(c.st.be, c.st.codec, m.Width, m.ContentLen)
	if err != nil {
		return err
	}
	defer fw.abort()
	var sec *deltaObject
	var enc *delta.DeltaEncoder // re-codes a version-2 section as version 1
	var base []byte
	if sec, err = c.st.objects.loadDelta(id); err != nil {
		return err
	}
	if sec.parsed.NeedsContext() {
		enc = delta.NewDeltaEncoder(m.Width, sec.info.Float, sec.info.Elements)
	}
	buf := make([]byte, min(m.ContentLen, ingestChunk))
	for off := int64(0); off < m.ContentLen; {
		n := min(int64(len(buf)), m.ContentLen-off)
		if err := c.st.objects.readObject(id, hint, off, buf[:n], readOpts{}); err != nil {
			return err
		}
		if _, err := fw.Write(buf[:n]); err != nil {
			return err
		}
		if enc != nil {
			// The base's bytes are the content with the section applied backward; their
			// differences from the content are the section's changes.
			base = append(base[:0], buf[:n]...)
			first := off / int64(m.Width)
			if err := sec.apply(id, base, first, delta.Backward); err != nil {
				return err
			}
			if _, err := enc.AddDiff(first, base, buf[:n]); err != nil {
				return objectError(id, fmt.Errorf("re-code delta section: %w", err))
			}
		}
		off += n
	}
	link := sec.body
	if enc != nil {
		if link, err = enc.Finish(); err != nil {
			return objectError(id, fmt.Errorf("re-code delta section: %w", err))
		}
		if enc.Changed() != sec.info.Changed {
			return objectError(id, fmt.Errorf("delta section of %d changes re-coded with %d: %w", sec.info.Changed, enc.Changed(), ErrCorrupt))
		}
	}
	linkBase := sec.hdr.Base
	if got, err := fw.finish(id, linkBase, link); err != nil {
		if !got.IsZero() && got != id {
			// The content read back is not the object's: damage.
			return fmt.Errorf("%v: %w", err, ErrCorrupt)
		}
		return err // a write failed (a full disk): not damage
	}
	if err := fw.put(id); err != nil {
		return err
	}
	c.st.objects.forgetObject(id)
	return nil
}
