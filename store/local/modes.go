package local

import (
	"fmt"
	"io/fs"
	"os"
)

// Modes are the permission bits of what a writer creates in a store (docs/format.md Part I
// §1): a store is private by default, and the writer gives the directories and files it
// creates the read bits of the store's format file (Init: 0600; InitShared: 0640).
type Modes struct {
	Dir    fs.FileMode // objects/, versions/, tmp/ and objects' fan-out directories
	File   fs.FileMode // the format file, manifests, the lock file
	Object fs.FileMode // objects: read-only, so that nothing writes them in place
}

// ModesFor derives a store's modes from its format file's permission bits.
func ModesFor(format fs.FileMode) Modes {
	r := format.Perm() & 0o044 // read for the group, for others
	return Modes{Dir: 0o700 | r | r>>2, File: 0o600 | r, Object: 0o400 | r}
}

// MkdirMode creates directory dir with exactly mode (the umask takes nothing away).
func MkdirMode(dir string, mode fs.FileMode) error {
	if err := os.Mkdir(dir, mode); err != nil {
		return err
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	return nil
}
