package store

import (
	"os"

	"github.com/weightfs/weightfs/store/local"
)

// The files of a local store's objects and packs (backend_local.go, backend_local_pack.go)
// are alike: read-only files STORE/<dir>/<2 hex>/<64 hex>, put by rename, opened only when
// regular, listed by walking the fan-out directories. One function each serves both; kind
// ("object", "pack") names the file in errors. The file operations are package
// store/local's; putFile, which keeps the backend's list of directories to sync, is here.

// putFile moves tmp, synced and made read-only, to dst, a file of a fan-out directory
// (local.Syncer.PutFile); kind ("object", "pack") names it in errors. The directories
// changed are synced by SyncObjects.
func (b *localBackend) putFile(kind string, id ID, tmp *os.File, dst string, makeTop bool) error {
	return b.syncer.PutFile(kind, id, tmp, dst, makeTop, b.modes)
}

// openRegularFile opens file p of an object or a pack (kind names it in errors).
func openRegularFile(kind string, id ID, p string) (ObjectFile, error) {
	f, err := local.OpenFile(kind, id, p)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// statFile is the size of file p of an object or a pack (kind names it in errors).
func statFile(kind string, id ID, p string) (int64, error) { return local.StatFile(kind, id, p) }

// listFanOut calls fn for each file of top/<2 hex>/<64 hex> (objects or packs: what names
// them in errors); a missing top lists nothing where missingOK says it may be missing.
func listFanOut(top, what string, missingOK bool, fn func(id ID, size int64) error) error {
	return local.ListFanOut(top, what, missingOK, fn)
}

// deleteFile removes file p of an object or a pack (kind names it in errors); a missing one
// is no error.
func deleteFile(kind string, id ID, p string) error { return local.DeleteFile(kind, id, p) }
