package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The index keeps version summaries by version number and object records by object ID,
// nothing that says which store they came from; a cache directory reused for another store
// (a --cache-dir named twice) would serve the first store's summaries for the second's
// versions. So the index records the identity of its store (meta/store) and an index of
// another store is emptied at open and refills (docs/format.md §6).

// indexOwner is the store an index belongs to, as openIndex is told it.
type indexOwner struct {
	// Store identifies the store (Opening.StoreID; its Root when that is nil).
	Store string
	// Own: the cache directory is the store's own (STORE/cache, a rank's cache under the
	// store, the writer's cache of an S3 store), so it cannot have been another store's. An
	// index written before identities were recorded (no meta/store) is adopted there and
	// emptied anywhere else.
	Own bool
}

// keyStore is the index's record of its store's identity (sealed like every record).
var keyStore = []byte("store")

// resetReason says why the index whose meta bucket is meta (nil: a new file) must be emptied
// before owner uses it; "" keeps it.
func (o indexOwner) resetReason(format, store []byte) string {
	switch {
	case string(format) != indexFormat:
		return fmt.Sprintf("it is of index format %q, this program's is %q", format, indexFormat)
	case store == nil && !o.Own:
		return "it records no store (written by an older program) and this cache directory is not the store's own"
	case store == nil:
		return ""
	}
	have, err := openValue(keyStore, store)
	if err != nil {
		return fmt.Sprintf("its store record is damaged (%v)", err)
	}
	if string(have) != o.Store {
		return fmt.Sprintf("it belongs to another store (%s; this store is %s)", have, o.Store)
	}
	return ""
}

// localStoreID is the identity of the local store at path that its indexes record: the inode
// number, modification time and change time (nanoseconds) of its format file, and the
// inode's generation number where the file system has one. A store has no stored id, and
// the format file is what makes a directory a store: written once by Init (and again only
// when a writer upgrades its format), never touched otherwise. Two stores that exist at once
// on one file system have distinct inodes; a store that replaces another (at the same path
// or reusing its inode) was initialized later, so its format file's times differ. Copies of
// one store made with cp -a or tar (which keep the modification time) into fresh file
// systems can have the same inode numbers; the change time (which no program sets) and the
// generation (drawn at random by ext4 and XFS) tell them apart. It does not depend on the
// path, so moving or remounting a store keeps its cache. What changes it (an upgrade of the
// format, a copy of the store, a touch or chmod of the format file) costs one rebuild of the
// index and the materialized copy, never a wrong answer.
func localStoreID(path string) (string, error) {
	info, err := os.Stat(filepath.Join(path, formatFileName))
	if err != nil {
		return "", fmt.Errorf("identify store %s: %w", path, err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("identify store %s: %s has no inode number", path, formatFileName)
	}
	id := fmt.Sprintf("local:%x-%x-%x", st.Ino, info.ModTime().UnixNano(), st.Ctim.Nano())
	if g := inodeGeneration(filepath.Join(path, formatFileName)); g != "" {
		id += "-" + g
	}
	return id, nil
}

// ownerOf returns the owner of the index in cacheDir of the store o opens.
func ownerOf(o Opening, cacheDir string) (indexOwner, error) {
	owner := indexOwner{Store: o.Root}
	if o.StoreID != nil {
		id, err := o.StoreID()
		if err != nil {
			return owner, err
		}
		owner.Store = id
	}
	owner.Own = sameOrUnder(cacheDir, o.WriterCacheDir, false) || sameOrUnder(cacheDir, o.Root, true)
	return owner, nil
}

// sameOrUnder reports whether dir is base (or, with under, lies beneath it), as absolute
// paths; an empty base or one that is no local path (s3://) is neither.
func sameOrUnder(dir, base string, under bool) bool {
	if base == "" || strings.Contains(base, "://") {
		return false
	}
	d, err1 := filepath.Abs(dir)
	b, err2 := filepath.Abs(base)
	if err1 != nil || err2 != nil {
		return false
	}
	if d == b {
		return true
	}
	return under && strings.HasPrefix(d, b+string(filepath.Separator))
}
