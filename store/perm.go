package store

import (
	"io/fs"

	"github.com/weightfs/weightfs/store/local"
)

// Permissions (docs/format.md (Part I) §1). A store is private by default, as restic's
// repositories are: its files hold every byte of every checkpoint, whatever the modes of the
// files they came from. Who may read a store's format file may read the store: the writer
// gives the directories and files it creates the read bits of the format file (Init: 0600;
// InitShared: 0640), so that a store made readable with chmod stays so. Open changes no
// mode. Node-local caches (the writer's STORE/cache, a reader's cache directory) are
// always private: each belongs to the process that made it.
const (
	cacheDirPerm  fs.FileMode = 0o700
	cacheFilePerm fs.FileMode = 0o600
)

// storeModes are the permission bits of what a writer creates in a store (local.Modes).
type storeModes = local.Modes

// modesFor derives a store's modes from its format file's permission bits.
func modesFor(format fs.FileMode) storeModes { return local.ModesFor(format) }

// mkdirMode creates directory dir with exactly mode (the umask takes nothing away).
func mkdirMode(dir string, mode fs.FileMode) error { return local.MkdirMode(dir, mode) }
