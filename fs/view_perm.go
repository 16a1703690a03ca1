package fs

import (
	"fmt"
	"path"
)

// The modes of view files. A patch or a delta carries bytes of the versions it is made from
// (a changed file whole, the changed values of a shard, file names and hashes), so on a mount
// other users may use (Options.AllowOther, which always comes with default_permissions) a view
// must not let anyone read what the versions' own modes keep from them. A view file's mode is
// therefore the most restrictive of its sources': read bits only, for each class (owner,
// group, others) that may read every file of every version it is made from, where reading a
// file also takes the search bit of each directory above it. A version with one 0600 file
// makes its patches 0400; one whose files all read 0644 makes them 0444.

// viewPerm is the mode of a view file made from sealed versions vs (0 entries are skipped:
// no base).
func (m *mountState) viewPerm(vs ...uint64) (uint32, error) {
	perm := uint32(0o444)
	for _, v := range vs {
		if v == 0 {
			continue
		}
		idx, err := m.index(v)
		if err != nil {
			return 0, fmt.Errorf("modes of version %d: %w", v, err)
		}
		perm &= idx.readableByAll()
	}
	return perm, nil
}

// readableByAll is the read bits of the classes that may read every file of the version.
func (idx *versionIndex) readableByAll() uint32 {
	perm := uint32(0o444)
	for p, e := range idx.entries {
		if !e.Dir {
			perm &= idx.readBits(p)
		}
	}
	return perm
}

// readBits is the read bits of the classes that may read the file at p: its own read bits,
// less those of classes that may not search a directory above it.
func (idx *versionIndex) readBits(p string) uint32 {
	e := idx.entries[p]
	bits := permOf(e) & 0o444
	for dir := path.Dir(p); ; dir = path.Dir(dir) {
		if dir == "." || dir == "/" {
			dir = ""
		}
		if d := idx.entries[dir]; d != nil {
			bits &= (permOf(d) & 0o111) << 2 // x of a class -> r of that class
		}
		if dir == "" {
			return bits
		}
	}
}
