package store

import "os"

// What the rest of the store asks of the materialized copy. Its fields are its own
// (copy_materialized.go): ingest, streams, checks and reads call these instead.

// contentChecks is the sums of content and the compositions vouched for that the copy keeps
// (copy_sums.go): reads, ingest and Verify note and look up theirs there.
func (m *materialized) contentChecks() *checks { return m.chk }

// isBroken says whether a read found the copy damaged (it is rebuilt before it is used again).
func (m *materialized) isBroken() bool { return m.broken.Load() }

// markBroken marks the copy damaged without starting its rebuild: ingest found a base's bytes
// in it that do not match the base, and rebuilds it itself (Writer.AddFile).
func (m *materialized) markBroken() { m.broken.Store(true) }

// baseCRC is the CRC-32C of the content of object id, if ingest noted it (ingest_basecheck.go).
func (m *materialized) baseCRC(id ID) (uint32, bool) { return m.crcs.get(id) }

// noteBaseCRC records the CRC-32C of the content of object id, which may be a base of the
// next version's tensors.
func (m *materialized) noteBaseCRC(id ID, crc uint32) { m.crcs.note(id, crc) }

// createSeed starts a seed file, which a stream fills with a file of a first version as it
// receives it (copy_seed.go).
func (m *materialized) createSeed() (*os.File, error) { return m.seeds.create() }

// deferrable says whether the seal of version v may leave the copy where it is
// (copy_defer.go): not when streams left seeds of v, whose bytes are on the disk already
// (adopting them is a rename), nor when the copy is broken.
func (m *materialized) deferrable(v uint64) bool {
	return !m.broken.Load() && !m.seeds.holdsVersion(v)
}

// seedFiles is the copy's seeds, which a finished stream offers its seed to.
func (m *materialized) seedFiles() *seeds { return m.seeds }

// checkOwnFiles checks every file of the version the copy holds against its manifest (SHA-256
// and objects), with no ensure running meanwhile. ver is nil when the copy holds no version;
// exists then says whether its directory is there at all.
func (m *materialized) checkOwnFiles() (ver *version, exists bool, err error) {
	m.ensureMu.Lock()
	defer m.ensureMu.Unlock()
	m.mu.RLock()
	ver = m.ver
	m.mu.RUnlock()
	if ver == nil {
		_, serr := os.Stat(m.dir)
		return nil, serr == nil, nil
	}
	return ver, true, checkCopyFiles(m.dir, ver)
}

// path is the copy's directory (CACHE/materialized).
func (m *materialized) path() string { return m.dir }

// holdsWhole says whether the copy of the view holds file f whole: its file of f's path has
// f's composition (the same objects at the same offsets, the same size and SHA-256).
func (v *matView) holdsWhole(f *manifestFile) bool {
	cf := v.ver.files[f.Path]
	sums := v.m.sums[f.Path]
	return cf != nil && sums != nil && sums.size == f.Size && composition(cf) == composition(f)
}
