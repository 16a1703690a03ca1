package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/weightfs/weightfs/delta"
)

// Mending (Repair, repair.go). An object is named by the SHA-256 of its content, so any
// source of that content proves itself: the bytes are written into a new whole object only if
// they hash to its name. The sources are the ones every read of them checks: the
// materialized copy and the file copies (each read checked against the CRC-32C sums written
// when the copy was checked against the manifest's SHA-256). An object is written again when
// its own file fails its checks (mended: a damaged delta object of version 3 whose content a
// checked copy holds), or when a version's file cannot be rebuilt through it because a base
// of its chain is damaged (re-anchored, as gc does: the latest version's tensors from the
// materialized copy), so that the versions the sources serve exactly stay and the ones no
// source serves are the only ones moved.

// repairer is one run of Repair: it plans from a Verify report (repair_mend.go) and carries
// the plan out (repair.go), reading the store through its read paths and writing objects
// through its backend. It holds no state of its own beyond the run.
type repairer struct {
	c *checker
	s *Store // c.st
}

// repairPlan is what Repair will do: objects to write again, then what to move.
type repairPlan struct {
	lost     []uint64  // manifests lost: recorded as gone, nothing to move
	rewrites []rewrite // objects to write again from an intact source
	versions []uint64  // to quarantine, ascending
	objects  []ID      // to quarantine
	kept     []uint64  // damaged, but served exactly through a read path: not moved
}

// rewrite is one object to write again whole, from source.
type rewrite struct {
	id      ID
	damaged bool   // its own file failed its checks (else it is sound, its chain is not)
	source  string // for the log and the report
	ver     *version
	f       *manifestFile
	seg     segment
	tensor  *manifestTensor // nil for a header or a blob
	// viaRead: the source is the object itself as the read path serves it (the file it
	// belongs to was read whole and hashed to the manifest's SHA-256 when planned; the
	// rewrite's content is checked against the object's name again).
	viaRead bool
	// keepLink: a sound object keeps its own delta section, byte for byte: its chain of
	// contexts avoids every object the repair moves (chainOfContextsAvoids).
	keepLink bool
}

// planRepair decides, from a Verify report with no unreadable finding, what to write again
// and what to move.
func (r *repairer) planRepair(vr VerifyReport) (repairPlan, error) {
	s := r.s
	var plan repairPlan
	badObj := map[ID]bool{}
	damagedVer := map[uint64]bool{}
	for _, d := range vr.Damaged {
		switch {
		case d.Version != 0:
			damagedVer[d.Version] = true
		case !d.Object.IsZero():
			badObj[d.Object] = true
		}
	}
	planned := map[ID]bool{} // objects with a rewrite
	// First the damaged objects that a source mends: the objects read through them read
	// again once they are mended, and need no rewrite of their own.
	readable := r.planMends(&plan, damagedVer, badObj, planned)
	unmended := map[ID]bool{}
	for id := range badObj {
		if !planned[id] {
			unmended[id] = true
		}
	}
	// The damaged objects mended (with their links): an object read through one of them reads
	// again. (Not the re-anchored ones planned below: stored without a link, a version-2
	// section coded against theirs would not decode.)
	mended := maps.Clone(planned)
	unmendable := map[ID]bool{} // objects that need one and have no source
	for _, v := range readable {
		ver, err := s.versions.loadVersion(v)
		if err != nil {
			return plan, err
		}
		r.planVersion(&plan, ver, badObj, planned, unmendable, mended, unmended)
	}
	if err := r.planKeepReadersOf(&plan, damagedVer, badObj, planned, unmended); err != nil {
		return plan, err
	}
	for _, id := range slices.SortedFunc(mapKeys(badObj), func(a, b ID) int { return strings.Compare(a.String(), b.String()) }) {
		if !planned[id] {
			plan.objects = append(plan.objects, id)
		}
	}
	return plan, nil
}

// planMends plans a rewrite, from an intact source, of each damaged object (of badObj) of the
// damaged versions whose manifests read, marking it in planned; a version whose manifest is
// lost or cannot be read goes into the plan as such. It returns the versions whose manifests
// read, ascending.
func (r *repairer) planMends(plan *repairPlan, damagedVer map[uint64]bool, badObj, planned map[ID]bool) (readable []uint64) {
	s := r.s
	for _, v := range slices.Sorted(mapKeys(damagedVer)) {
		if _, err := s.be.GetManifest(v); errors.Is(err, fs.ErrNotExist) {
			plan.lost = append(plan.lost, v)
			continue
		}
		ver, err := r.c.loadVersionFresh(v)
		if err != nil {
			plan.versions = append(plan.versions, v) // its manifest cannot be read
			continue
		}
		readable = append(readable, v)
		for i := range ver.m.Files {
			f := &ver.m.Files[i]
			for _, sg := range s.newVersionFile(ver, f, readOpts{}).segs {
				if !badObj[sg.id] || planned[sg.id] {
					continue
				}
				if src, ok := r.sourceOf(ver, f, sg); ok {
					planned[sg.id] = true
					plan.rewrites = append(plan.rewrites, rewrite{id: sg.id, damaged: true, source: src, ver: ver, f: f, seg: sg, tensor: tensorAt(f, sg)})
				}
			}
		}
	}
	return readable
}

// planVersion plans, for damaged version ver, a rewrite of every object of its files that
// neither reads exactly nor reads once the planned mends are done, from an intact source; an
// object with no source is marked in unmendable. Then it decides the version: whole after the
// rewrites, kept (a read path serves it exactly), or to be moved.
func (r *repairer) planVersion(plan *repairPlan, ver *version, badObj, planned, unmendable, mended, unmended map[ID]bool) {
	s := r.s
	v := ver.m.Version
	fixable := true
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		for _, sg := range s.newVersionFile(ver, f, readOpts{}).segs {
			id := sg.id
			if planned[id] {
				continue
			}
			if unmendable[id] {
				fixable = false
				continue
			}
			if !badObj[id] && (r.objectReadsExactly(id, sg) || r.readsOnceMended(id, mended, unmended)) {
				continue
			}
			src, ok := r.sourceOf(ver, f, sg)
			if !ok {
				unmendable[id] = true
				fixable = false
				continue
			}
			planned[id] = true
			plan.rewrites = append(plan.rewrites, rewrite{id: id, damaged: badObj[id], source: src, ver: ver, f: f, seg: sg, tensor: tensorAt(f, sg)})
		}
	}
	if fixable && r.versionHashesAfter(ver, planned, mended, unmended) {
		return // the rewrites make it whole
	}
	if r.servesExactly(ver) {
		plan.kept = append(plan.kept, v)
		s.log.Warn("repair: damaged version not moved: a read path serves it exactly", "version", v)
		return
	}
	plan.versions = append(plan.versions, v)
}

// planKeepReadersOf plans the re-anchoring of the sound objects of the versions Verify found
// whole (served exactly, through a checked source) whose chain of bases runs through a
// damaged object that is moved and not mended: once it is gone they would no longer be
// rebuilt, and a version that read exactly would turn damaged. Only an object nothing is
// coded against is re-anchored (stored without a link, a version-2 section coded against its
// own would not decode): the latest version's, which the materialized copy holds.
func (r *repairer) planKeepReadersOf(plan *repairPlan, damagedVer map[uint64]bool, badObj, planned, unmended map[ID]bool) error {
	s := r.s
	if len(unmended) == 0 {
		return nil
	}
	type use struct {
		ver *version
		f   *manifestFile
		sg  segment
	}
	var through []use
	coded := map[ID]bool{} // objects some object is coded against
	for _, info := range s.Versions() {
		ver, err := s.versions.loadVersion(info.Number)
		if err != nil {
			if damagedVer[info.Number] {
				continue
			}
			return err
		}
		for i := range ver.m.Files {
			f := &ver.m.Files[i]
			for _, sg := range s.newVersionFile(ver, f, readOpts{}).segs {
				if oi, err := s.objects.objectInfoOf(sg.id); err == nil && oi.hdr.DeltaLen != 0 && !oi.hdr.Base.IsZero() {
					coded[oi.hdr.Base] = true // also by the damaged versions' objects
				}
				if !damagedVer[info.Number] && !planned[sg.id] && !badObj[sg.id] && r.chainRunsThrough(sg.id, unmended) {
					through = append(through, use{ver, f, sg})
				}
			}
		}
	}
	for _, u := range through {
		id := u.sg.id
		if planned[id] {
			continue
		}
		src, ok := r.sourceOf(u.ver, u.f, u.sg)
		viaRead := false
		if !ok && r.fileReadsExactly(u.ver, u.f, false) {
			src, ok, viaRead = fmt.Sprintf("%s of version %d as read (checked against its SHA-256)", u.f.Path, u.ver.m.Version), true, true
		}
		keepLink := r.chainOfContextsAvoids(id, unmended)
		if !ok || (coded[id] && !keepLink) {
			s.log.Warn("repair: an object of a version Verify found whole reads through a damaged object, and no source re-anchors it", "object", id, "version", u.ver.m.Version)
			continue
		}
		planned[id] = true
		plan.rewrites = append(plan.rewrites, rewrite{id: id, source: src, ver: u.ver, f: u.f, seg: u.sg, tensor: tensorAt(u.f, u.sg), viaRead: viaRead, keepLink: keepLink})
	}
	return nil
}

// chainOfContextsAvoids reports whether object id's delta section loads now and will once
// the objects of set are gone: no section of its chain of contexts belongs to one of them.
func (r *repairer) chainOfContextsAvoids(id ID, set map[ID]bool) bool {
	s := r.s
	d, err := s.objects.loadDelta(id)
	for range maxContextRead {
		if err != nil {
			return false
		}
		if !d.parsed.NeedsContext() {
			return true
		}
		if set[d.hdr.Base] {
			return false
		}
		d, err = s.objects.loadDelta(d.hdr.Base)
	}
	return false
}

// chainRunsThrough reports whether object id's chain of bases holds one of set.
func (r *repairer) chainRunsThrough(id ID, set map[ID]bool) bool {
	s := r.s
	info, err := s.objects.objectInfoOf(id)
	for range maxContextRead {
		if err != nil || info.hdr.DeltaLen == 0 || info.hdr.Base.IsZero() {
			return false
		}
		if set[info.hdr.Base] {
			return true
		}
		info, err = s.objects.objectInfoOf(info.hdr.Base)
	}
	return false
}

// readsOnceMended reports whether object id fails only through damaged objects that are
// mended: its chain of bases holds one of mended and none of unmended. (The Verify after the
// rewrites tells whether it reads.)
func (r *repairer) readsOnceMended(id ID, mended, unmended map[ID]bool) bool {
	s := r.s
	info, err := s.objects.objectInfoOf(id)
	through := false
	for range maxContextRead {
		if err != nil {
			// Past a mended object, its damaged header may name anything.
			return through
		}
		if info.hdr.DeltaLen == 0 || info.hdr.Base.IsZero() {
			return through
		}
		base := info.hdr.Base
		if unmended[base] {
			return false
		}
		through = through || mended[base]
		info, err = s.objects.objectInfoOf(base)
	}
	return false
}

// versionHashesAfter reports whether ver's objects, once planned are written again, rebuild
// its files: every object not planned reads exactly now. (The files' SHA-256 are checked by
// the Verify that follows the rewrites.)
func (r *repairer) versionHashesAfter(ver *version, planned, mended, unmended map[ID]bool) bool {
	s := r.s
	for i := range ver.m.Files {
		for _, sg := range s.newVersionFile(ver, &ver.m.Files[i], readOpts{}).segs {
			if !planned[sg.id] && !r.objectReadsExactly(sg.id, sg) && !r.readsOnceMended(sg.id, mended, unmended) {
				return false
			}
		}
	}
	return true
}

// tensorAt is the tensor of f that segment sg holds, or nil (the header, a blob).
func tensorAt(f *manifestFile, sg segment) *manifestTensor {
	if sg.hint.tensor == "" {
		return nil
	}
	for i := range f.Tensors {
		if t := &f.Tensors[i]; t.Name == sg.hint.tensor && t.ID == sg.id {
			return t
		}
	}
	return nil
}

// objectReadsExactly reports whether object id reads from the store's objects and hashes to
// its name.
func (r *repairer) objectReadsExactly(id ID, sg segment) bool {
	got, err := r.c.hashObject(id, sg.hint, sg.end-sg.start, readOpts{noMaterialized: true, pages: newPageCache(8 << 20)})
	return err == nil && got == id
}

// sourceOf says where the content of segment sg of file f of ver can be had intact, apart
// from its object and the objects it is rebuilt from: the materialized copy, or a checked
// copy of the file.
func (r *repairer) sourceOf(ver *version, f *manifestFile, sg segment) (string, bool) {
	s := r.s
	if view := s.mat.view(); view != nil {
		holds, at := view.holds(sg.id), view.ver.m.Version
		view.release()
		if holds {
			return fmt.Sprintf("the materialized copy of version %d", at), true
		}
	}
	if s.files != nil {
		if c := s.files.get(keyOf(f)); c != nil {
			c.release()
			return fmt.Sprintf("the checked copy of %s of version %d", f.Path, ver.m.Version), true
		}
	}
	return "", false
}

// readSource reads content bytes [off, off+len(p)) of the rewrite's object from its source,
// every read checked against the source's sums.
func (r *repairer) readSource(m rewrite, p []byte, off int64) error {
	s := r.s
	if m.viaRead {
		return s.objects.readObject(m.id, m.seg.hint, off, p, readOpts{})
	}
	if view := s.mat.view(); view != nil {
		if view.holds(m.id) {
			err := view.readAt(m.id, p, off)
			view.release()
			return err
		}
		view.release()
	}
	if s.files != nil {
		if c := s.files.get(keyOf(m.f)); c != nil {
			defer c.release()
			return s.files.readAt(c, m.ver, m.f, p, m.seg.start+off)
		}
	}
	return fmt.Errorf("object %s: its source (%s) is gone", m.id, m.source)
}

// servesExactly reports whether every file of ver is served exactly through some read path
// (its sources, else the objects with the materialized copy), checked against the
// manifest's SHA-256.
func (r *repairer) servesExactly(ver *version) bool {
	for i := range ver.m.Files {
		if !r.fileReadsExactly(ver, &ver.m.Files[i], true) {
			return false
		}
	}
	return true
}

// fileReadsExactly reports whether file f of ver reads whole and hashes to the manifest's
// SHA-256: each segment from its source where one holds it and fromSources is set, else
// through the read path (the objects, with the materialized copy).
func (r *repairer) fileReadsExactly(ver *version, f *manifestFile, fromSources bool) bool {
	s := r.s
	h := sha256.New()
	for _, sg := range s.newVersionFile(ver, f, readOpts{}).segs {
		m := rewrite{id: sg.id, ver: ver, f: f, seg: sg}
		_, fromSource := r.sourceOf(ver, f, sg)
		fromSource = fromSource && fromSources
		buf := make([]byte, min(sg.end-sg.start, ingestChunk))
		for off := int64(0); off < sg.end-sg.start; {
			n := min(int64(len(buf)), sg.end-sg.start-off)
			var err error
			if fromSource {
				err = r.readSource(m, buf[:n], off)
			} else {
				err = s.objects.readObject(sg.id, sg.hint, off, buf[:n], readOpts{})
			}
			if err != nil {
				return false
			}
			h.Write(buf[:n])
			off += n
		}
	}
	var got ID
	h.Sum(got[:0])
	return got == f.SHA256
}

// rewriteWhole writes object m.id again as a whole copy of the content its source holds,
// replacing the file only if that content hashes to the name. A damaged object gets back
// a link, the delta from its base re-coded in version 1, where the base reads: the deltas
// coded against its section (their context) decode again; a re-anchored one keeps its own
// section byte for byte where it loads (older versions are rebuilt back through it).
func (r *repairer) rewriteWhole(m rewrite) error {
	s := r.s
	size := m.seg.end - m.seg.start
	width, float := 1, false
	if m.tensor != nil {
		width, float = m.tensor.DType.Size(), m.tensor.DType.IsFloat()
	}
	fw, err := newFullWriter(s.be, s.codec, width, size)
	if err != nil {
		return err
	}
	defer fw.abort()
	var enc *delta.DeltaEncoder
	var base ID
	if m.damaged && m.tensor != nil && !m.tensor.Base.IsZero() && m.tensor.Base != m.id && width > 0 && size%int64(width) == 0 {
		base = m.tensor.Base
		enc = delta.NewDeltaEncoder(width, float, size/int64(width))
	}
	buf := make([]byte, min(size, ingestChunk))
	var bbuf []byte
	if enc != nil {
		bbuf = make([]byte, len(buf))
	}
	baseHint := objHint{path: m.seg.hint.path, tensor: m.seg.hint.tensor}
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		if err := r.readSource(m, buf[:n], off); err != nil {
			return err
		}
		if _, err := fw.Write(buf[:n]); err != nil {
			return err
		}
		if enc != nil {
			if err := s.objects.readObject(base, baseHint, off, bbuf[:n], readOpts{}); err != nil {
				s.log.Warn("repair: object written again without its link: its base does not read", "object", m.id, "base", base, "err", err)
				enc = nil
			} else if _, err := enc.AddDiff(off/int64(width), bbuf[:n], buf[:n]); err != nil {
				s.log.Warn("repair: object written again without its link", "object", m.id, "err", err)
				enc = nil
			}
		}
		off += n
	}
	var link []byte
	if !m.damaged && m.keepLink {
		// A sound object re-anchored because its chain is damaged keeps its own delta
		// section as it is: the reads that rebuild older versions back from the
		// materialized copy go through it, and the sections coded against it keep their
		// context. Its file is intact (loadDelta checks its CRC-32C and its context).
		if d, err := s.objects.loadDelta(m.id); err == nil {
			link, base = d.body, d.hdr.Base
		}
	}
	if enc != nil {
		if l, err := enc.Finish(); err == nil && enc.Changed() == m.tensor.Changed {
			link = l
		} else {
			s.log.Warn("repair: object written again without its link: the re-coded delta does not match the manifest", "object", m.id, "changes", enc.Changed(), "manifest", m.tensor.Changed, "err", err)
		}
	}
	if got, err := fw.finish(m.id, base, link); err != nil {
		if !got.IsZero() && got != m.id {
			return fmt.Errorf("%s holds content hashing to %s: %w", m.source, got, ErrCorrupt)
		}
		return err
	}
	if err := fw.put(m.id); err != nil {
		return err
	}
	s.objects.forgetObject(m.id)
	return nil
}
