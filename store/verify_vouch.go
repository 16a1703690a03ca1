package store

import "fmt"

// The whole-file vouch: the reference that the per-tensor checks (read_check.go) replaced on
// OpenFile's reads (issue 30), kept for the tests that compare the two (readOpts.vouch). A
// manifest says which objects make each file, in order, and the SHA-256 of the whole file; a
// file read with readOpts.vouch is vouched for before its first byte is served: its
// composition (the objects in order, and the SHA-256: composition in copy_sums.go) must have
// been seen to hash to that SHA-256, by this process or one that recorded it in the same cache
// directory's index. The first read of a file not vouched for reads the whole file once
// (through the same read path) and hashes it, writing it into a checked copy (filecopy.go); a
// mismatch fails every read of the file with ErrCorrupt. Unlike the per-tensor checks it also
// refuses a manifest whose objects were swapped and its CRC recomputed, which is outside the
// threat model (docs/design.md, "What the checks guard against"), at the price of a pass over
// the whole file before the first byte. Compositions are still vouched for when the copy of
// the latest version is built or checked (copySums), when a stream of this process computed
// the objects and the SHA-256 from the same bytes (seedWriter), and by writer groups'
// publishers (group_check.go).

// vouch checks f's composition once (see above).
func (f *versionFile) vouch() error {
	if !f.opts.vouch || f.vouched.Load() {
		return nil
	}
	if err := f.s.checker.vouchFile(f.ver, f.f); err != nil {
		return f.s.collector.removedByGC(f.ver.m.Version, err)
	}
	f.vouched.Store(true)
	return nil
}

// vouchFile checks that the objects of file f of ver hash to its SHA-256, unless that
// composition was vouched for already. Concurrent first reads of one file hash it once.
func (c *checker) vouchFile(ver *version, f *manifestFile) error {
	s := c.st
	comp := composition(f)
	chk := s.mat.contentChecks()
	if chk.isVouched(comp) {
		return nil
	}
	if err := chk.failedVouch(comp); err != nil {
		return err
	}
	_, err, _ := chk.flight.Do(string(comp[:]), func() (any, error) {
		if chk.isVouched(comp) {
			return nil, nil
		}
		// The pass also writes the file's copy (filecopy.go), which serves the reads that
		// follow instead of rebuilding every page again.
		got, err := s.passFile(ver, f, nil)
		if err != nil {
			return nil, err
		}
		if got != f.SHA256 {
			s.log.Warn(fmt.Sprintf("its objects hash to %s, the manifest says %s: every read of it fails (a damaged or forged manifest; run weightfs verify)", got, f.SHA256),
				"version", ver.m.Version, "file", f.Path)
			err := fmt.Errorf("%s of version %d: its objects hash to %s, the manifest says %s: %w", f.Path, ver.m.Version, got, f.SHA256, ErrCorrupt)
			chk.noteFailedVouch(comp, err)
			return nil, err
		}
		chk.vouch(true, comp)
		return nil, nil
	})
	return err
}
