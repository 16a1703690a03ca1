package store

import (
	"github.com/weightfs/weightfs/store/format"
	"github.com/weightfs/weightfs/store/local"
)

// The local backend, a store in a directory, is package store/local's Backend, a peer of
// store/s3's: Open and OpenRank build it (local.New, local.NewRank) and open the store on
// it through OpenBackend, as store/s3's Open does with its own. store names it localBackend
// (its tests reach into its files: ObjectPath, PackPath, ManifestPath).
type localBackend = local.Backend

// newLocalBackend is the backend of the local store at root (local.New).
func newLocalBackend(root string, modes storeModes) *localBackend { return local.New(root, modes) }

// newRankBackend is the backend of a writer group's rank: lb with its temporary files in
// tmpDir (local.NewRank).
func newRankBackend(lb *localBackend, tmpDir string) *local.RankBackend {
	return local.NewRank(lb, tmpDir)
}

// The optional parts the local backend has, which backendCaps.use asserts at open.
var (
	_ Backend                            = (*localBackend)(nil)
	_ PackBackend                        = (*localBackend)(nil)
	_ Records                            = (*localBackend)(nil)
	_ Quarantiner                        = (*localBackend)(nil)
	_ PackQuarantiner                    = (*localBackend)(nil)
	_ fsyncCounter                       = (*localBackend)(nil)
	_ packAger                           = (*localBackend)(nil)
	_ localDirBackend                    = (*localBackend)(nil)
	_ interface{ NoLooseObjects() bool } = (*localBackend)(nil)
	_ Backend                            = (*local.RankBackend)(nil)
)

// localDirBackend is a backend that keeps the store in a local directory: a writer's
// default cache lives beside the objects there (Verify checks it: verify_caches.go).
type localDirBackend interface {
	LocalDir() string
}

// The directories of a local store's layout that store (OpenRank) and its tests name.
const (
	packDir  = local.PackDir
	indexDir = local.IndexDir
	groupDir = local.GroupDir
)

// manifestName is "v" and the number (format.ManifestName).
func manifestName(v uint64) string { return format.ManifestName(v) }

// parseManifestName is the inverse of manifestName (format.ParseManifestName).
func parseManifestName(name string) (uint64, bool) { return format.ParseManifestName(name) }
