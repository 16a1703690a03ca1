package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"syscall"
)

// Damage is one damaged object or version found by Verify, or (Object and Version zero) a
// file of the store itself: its format file (verify_format.go).
type Damage struct {
	Object  ID     // zero for a version-level finding
	Version uint64 // zero for an object-level finding
	Path    string // the file of the version, if any; the store's file, for a store-level finding
	Err     error
}

func (d Damage) String() string {
	switch {
	case d.Version != 0 && d.Path != "":
		return fmt.Sprintf("version %d: %s: %v", d.Version, d.Path, d.Err)
	case d.Version != 0:
		return fmt.Sprintf("version %d: %v", d.Version, d.Err)
	case d.Object.IsZero() && d.Path != "":
		return fmt.Sprintf("%s: %v", d.Path, d.Err)
	}
	return fmt.Sprintf("object %s: %v", d.Object, d.Err)
}

// VerifyReport summarises a Verify run.
type VerifyReport struct {
	Objects  int // objects checked
	Versions int // versions checked
	Bytes    int64
	Damaged  []Damage
	// Unreadable lists what could not be checked: an I/O error (EIO, EMFILE, EACCES, ...) is
	// no verdict of damage, and Repair acts on none of these.
	Unreadable []Damage
	// Caches lists the node-local caches checked (verify_caches.go): a damaged cache is
	// reported and dropped there, not in Damaged.
	Caches []CacheCheck
	// Notes says, for people, what Verify could not tell (a gone version that no gc record
	// covers, judged by the deltas after it alone; a damaged gc record): not damage.
	Notes []string
	// Packs is what Verify found of the store's packs and pack indexes (format 3,
	// verify_packs.go): its damage counts in the verdict; zero for a store without packs.
	Packs PackReport
}

// Verify re-reads every object (its CRC, header and framing), reconstructs every file of
// every version from the store's objects alone (not the materialized copy) and checks each
// object's SHA-256, each tensor's xxh3-128 where its manifest keeps one, and each file's
// SHA-256, then reconstructs the objects no version names.
// A version that a later version names as its previous, but whose manifest is gone, is
// damage (a lost manifest) when the gc record covers it and does not list it as dropped
// (gc_record.go, verify_gone.go); one the record does not cover is damage when that later
// version has a delta against an object no version names (gc would have stored it whole),
// and the report's Notes say that this is all Verify could tell. A format file of format 1
// over objects holding version-2 delta sections is damage of that file (verify_format.go). It
// reports every damaged object and version; the error (wrapping ErrCorrupt) is non-nil if
// there is any. Then it checks the node-local caches it can see (CacheCheck), which never
// count as damage of the store. progress (nil: none) gets the bytes done of the total to read: every
// object file, then every file of every version, then the packs (verify_packs.go).
func (s *Store) Verify(progress func(done, total int64)) (VerifyReport, error) {
	if err := s.checkOpen(); err != nil {
		return VerifyReport{}, err
	}
	return s.checker.verify(progress)
}

// checker is what checks the store's bytes against their names: Verify, Repair (its
// repairer, repair.go), Export (verify_export.go) and the vouching of a file before its first read
// (verify_vouch.go). It holds no state of its own: every check reads the store afresh through its
// read paths.
type checker struct {
	// st is the store it checks: its read paths, versions and caches, reached through their
	// methods.
	st *Store
}

func newChecker(s *Store) *checker {
	return &checker{st: s}
}

// verifyProgress counts Verify's bytes done of its total for the progress callback.
type verifyProgress struct {
	fn          func(done, total int64) // nil: none
	done, total int64
}

func (p *verifyProgress) add(n int64) {
	p.done += n
	if p.fn != nil {
		p.fn(p.done, p.total)
	}
}

// verify is Verify on an open store.
func (c *checker) verify(progress func(done, total int64)) (VerifyReport, error) {
	s := c.st
	var rep VerifyReport
	prog := &verifyProgress{fn: progress}
	// Everything is re-read from the backend.
	// The pack layer's map too: another process's gc may have rewritten the packs and
	// consolidated the indexes since they were read.
	if err := s.be.reloadIndexes(); err != nil {
		return rep, err
	}
	s.objects.dropHeaders()
	s.objects.dropCRCs()

	ids, bad, sections2, err := c.checkObjects(&rep, prog)
	if err != nil {
		return rep, err
	}
	pages := newPageCache(64 << 20)
	opts := readOpts{noMaterialized: true, pages: pages}
	checked, err := c.verifyVersions(&rep, prog, opts)
	if err != nil {
		return rep, err
	}
	c.verifyUnnamed(&rep, ids, checked, bad, opts)
	if err := c.verifyPacks(&rep, prog); err != nil {
		return rep, err
	}
	if d, ok := c.checkFormatFile(sections2); !ok {
		rep.Damaged = append(rep.Damaged, d)
	}
	rep.Caches = c.verifyCaches()
	return rep, rep.verdict()
}

// checkObjects checks every object file on its own (checkObject), in the order of their
// names, adding their sizes to prog's total. It returns the objects, those that failed their
// own checks, and those whose delta section is of body version 2.
func (c *checker) checkObjects(rep *VerifyReport, prog *verifyProgress) (ids []ID, bad map[ID]bool, sections2 []ID, err error) {
	s := c.st
	bad = map[ID]bool{}
	// Each object's size beside its id, sorted together: no map of every object (one
	// entry per object is heap the collector walks, and lookups that miss the CPU's caches).
	type listed struct {
		id   ID
		size int64
	}
	var all []listed
	if err := s.be.ListObjects(func(id ID, size int64) error {
		all = append(all, listed{id, size})
		prog.total += size
		return nil
	}); err != nil {
		return nil, nil, nil, err
	}
	// (bytes.Compare: string(a[:]) allocated twice a comparison, n log n allocations.)
	slices.SortFunc(all, func(a, b listed) int { return bytes.Compare(a.id[:], b.id[:]) })
	ids = make([]ID, len(all))
	var buf []byte // a small record read whole (object_whole.go), reused
	for i, o := range all {
		ids[i] = o.id
		version, next, ok := s.objects.checkWhole(o.id, buf)
		buf = next
		err = nil
		if !ok {
			// Large, or failing a check: the ordinary path says what is wrong.
			version, err = c.checkObject(o.id)
		}
		var cf *contextFailure
		switch {
		case err != nil && errors.As(err, &cf):
			// Its own file passed; its base's section did not load: that is reported with
			// the base (its own check), or with the versions read through it.
		case err != nil:
			rep.add(Damage{Object: o.id, Err: err})
			bad[o.id] = true
		}
		if version >= 2 {
			sections2 = append(sections2, o.id)
		}
		rep.Objects++
		prog.add(o.size)
	}
	return ids, bad, sections2, nil
}

// verifyVersions reconstructs every file of every version from the objects (verifyFile),
// adding their sizes to prog's total first, and judges each previous version that is gone
// (verify_gone.go). It returns the objects whose content a file's check reached.
func (c *checker) verifyVersions(rep *VerifyReport, prog *verifyProgress, opts readOpts) (checked map[ID]bool, err error) {
	s := c.st
	numbers, err := s.be.ListManifests()
	if err != nil {
		return nil, err
	}
	checked = map[ID]bool{}
	gone := goneVersions{present: map[uint64]bool{}}
	for _, v := range numbers {
		gone.present[v] = true
	}
	if gone.quarantined, err = c.quarantinedVersions(); err != nil {
		return nil, err
	}
	// The summaries give the total; each version is parsed when its turn comes (holding all
	// of them parsed at once cost ~300 bytes a tensor of every version).
	for _, v := range numbers {
		if info, err := s.versions.versionSummary(v); err == nil {
			prog.total += info.LogicalBytes
		}
	}
	gone.rec, gone.recOK = c.verifyGCRecord(rep)
	named := map[ID]bool{} // every object a manifest names
	var bufs wholeBufs
	for _, v := range numbers {
		ver, err := c.loadVersionFresh(v)
		if err != nil {
			rep.add(Damage{Version: v, Err: err})
			continue
		}
		manifestRoots(ver.m, named)
		c.notePrevious(&gone, rep, ver)
		rep.Versions++
		for j := range ver.m.Files {
			f := &ver.m.Files[j]
			n, err := c.verifyFile(ver, f, opts, checked, &bufs)
			rep.Bytes += n
			if err != nil {
				rep.add(Damage{Version: ver.m.Version, Path: f.Path, Err: err})
			}
			prog.add(f.Size)
		}
	}
	gone.report(rep, named)
	return checked, nil
}

// quarantinedVersions lists the versions in quarantine. A version that Repair moved there is
// gone on purpose, and said so then: a later version that names it is not a sign of a deleted
// manifest.
func (c *checker) quarantinedVersions() (map[uint64]bool, error) {
	quarantined := map[uint64]bool{}
	if q := c.st.be.quarantine; q != nil {
		qs, err := q.ListQuarantined()
		if err != nil {
			return nil, err
		}
		for _, v := range qs {
			quarantined[v] = true
		}
	}
	return quarantined, nil
}

// verifyUnnamed checks the objects no version names (bases only, or left by an interrupted
// writer), and named ones a version's check did not reach. An object whose chain of bases
// holds an object that failed its own check is not damaged itself: its reads fail through
// that one, which is reported (and what Repair acts on).
func (c *checker) verifyUnnamed(rep *VerifyReport, ids []ID, checked, bad map[ID]bool, opts readOpts) {
	s := c.st
	for _, id := range ids {
		if checked[id] || bad[id] || c.baseChainBroken(id, bad) {
			continue
		}
		m, err := s.objects.meta(id)
		if err == nil {
			var got ID
			got, err = c.hashObject(id, objHint{}, m.ContentLen, opts)
			if err == nil && got != id {
				err = fmt.Errorf("content hashes to %s: %w", got, ErrCorrupt)
			}
		}
		if err != nil {
			rep.add(Damage{Object: id, Err: err})
		}
	}
}

// verdict is Verify's error for rep: the damage it found (wrapping ErrCorrupt), else what it
// could not check, else nil.
func (rep *VerifyReport) verdict() error {
	if len(rep.Damaged)+len(rep.Packs.Damaged) > 0 {
		lines := make([]string, 0, len(rep.Damaged)+len(rep.Packs.Damaged))
		for _, d := range rep.Damaged {
			lines = append(lines, d.String())
		}
		for _, d := range rep.Packs.Damaged {
			lines = append(lines, d.String())
		}
		return fmt.Errorf("verify: %d damaged: %s%s: %w", len(lines), strings.Join(lines, "; "), rep.unreadableNote(), ErrCorrupt)
	}
	if len(rep.Unreadable) > 0 {
		return rep.unreadableError()
	}
	return nil
}

// add files a finding: damage (a failed check, a missing file), or, for an I/O error or
// any other failure of the check itself, Unreadable: no verdict either way.
func (rep *VerifyReport) add(d Damage) {
	if isVerdictDamage(d.Err) {
		rep.Damaged = append(rep.Damaged, d)
	} else {
		rep.Unreadable = append(rep.Unreadable, d)
	}
}

// unreadableNote is the part of Verify's damage error that names what could not be checked.
func (rep *VerifyReport) unreadableNote() string {
	if len(rep.Unreadable) == 0 {
		return ""
	}
	return fmt.Sprintf(" (and %d could not be checked: %v)", len(rep.Unreadable), rep.unreadableError())
}

// unreadableError is Verify's error when it could not check something but found no damage:
// it wraps the first error (errors.Is finds its errno), not ErrCorrupt.
func (rep *VerifyReport) unreadableError() error {
	lines := make([]string, len(rep.Unreadable))
	for i, d := range rep.Unreadable {
		lines[i] = d.String()
	}
	// The errno (or the first error, when it holds none), not ErrCorrupt.
	var cause error = errors.New("check failed")
	var errno syscall.Errno
	if errors.As(rep.Unreadable[0].Err, &errno) {
		cause = errno
	} else if !errors.Is(rep.Unreadable[0].Err, ErrCorrupt) {
		cause = rep.Unreadable[0].Err
	}
	return fmt.Errorf("verify: %d could not be checked (an error of the check, not damage; run it again once the error is gone): %s: %w",
		len(rep.Unreadable), strings.Join(lines, "; "), cause)
}

// isVerdictDamage reports whether a finding's error is a verdict of damage: a failed check
// or a missing file, and no I/O error (EIO, EMFILE, EACCES, ...) on the way. A file system
// that fails a read says nothing of the bytes: they may be intact.
func isVerdictDamage(err error) bool {
	return !isIOError(err) && (errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist))
}

// isIOError reports whether err holds an error of the operating system other than one that
// says the store's layout is damaged: a missing file (ENOENT), a path through a file
// (ENOTDIR), a directory where a file belongs (EISDIR).
func isIOError(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case syscall.ENOENT, syscall.ENOTDIR, syscall.EISDIR:
		return false
	}
	return true
}

// baseChainBroken reports whether the chain of bases of object id (its base, the base's
// base, ..., as far as objects carry a delta section) holds an object of bad, or one that is
// missing (moved into quarantine by Repair: the versions that needed it went with it).
func (c *checker) baseChainBroken(id ID, bad map[ID]bool) bool {
	s := c.st
	// (Headers alone: meta walks the whole chain and fails where it is broken.)
	info, err := s.objects.objectInfoOf(id)
	for range maxContextRead {
		if err != nil || info.hdr.DeltaLen == 0 || info.hdr.Base.IsZero() {
			return false
		}
		base := info.hdr.Base
		if bad[base] {
			return true
		}
		if info, err = s.objects.objectInfoOf(base); err != nil {
			return isVerdictDamage(err) // a base missing or failing its check
		}
	}
	return false
}

// deltasBasedOutside lists, for the oldest version whose previous manifest is gone, its
// tensors that are deltas: each as the Damage its previous would be if that base (in
// Damage.Object) turns out to be named by no version (Verify decides once it has seen every
// manifest).
func (c *checker) deltasBasedOutside(ver *version) []Damage {
	s := c.st
	var out []Damage
	p := ver.m.Previous
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		for j := range f.Tensors {
			id := f.Tensors[j].ID
			m, err := s.objects.meta(id)
			if err != nil || m.Kind != kindDelta {
				continue // damage of the object itself is reported with the object
			}
			// What this process remembers of the object may predate a gc (another
			// process's, or a writer's retention) that rewrote it whole in place: the
			// verdict is taken from the object's header as it is now.
			s.objects.forgetMeta(id)
			if m, err = s.objects.meta(id); err != nil || m.Kind != kindDelta {
				continue
			}
			out = append(out, Damage{Version: p, Object: m.Base,
				Err: fmt.Errorf("manifest missing: version %d names it as its previous and its tensor %s of %s is a delta against %s, which no version names (gc would have stored it whole): %w",
					ver.m.Version, f.Tensors[j].Name, f.Path, m.Base, ErrCorrupt)})
		}
	}
	return out
}

// checkObject checks one object file without reconstructing it: header, name, CRC, framing
// of its sections. It returns the body version of its delta section (0: none; a section that
// fails its checks is not counted).
func (c *checker) checkObject(id ID) (int, error) {
	s := c.st
	f, info, err := s.objects.openObject(id)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := checkCRC(f); err != nil {
		if errors.Is(err, errOtherCopy) {
			// A damaged record (checkPacks reports it): the object's other copy is checked.
			s.objects.forgetCopy(id)
			return c.checkObject(id)
		}
		return 0, err
	}
	s.objects.noteCRC(id)
	if !info.hdr.HasDelta() {
		return 0, nil
	}
	d, err := s.objects.loadDelta(id)
	if err != nil {
		return 0, err
	}
	return d.info.Version, nil
}

// loadVersionFresh reads and checks a manifest from the backend, bypassing the cache.
func (c *checker) loadVersionFresh(v uint64) (*version, error) {
	s := c.st
	s.versions.forget(v)
	return s.versions.loadVersion(v)
}
