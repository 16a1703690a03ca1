package store

import "log/slog"

// TODO(repack helper): this file stands in for store/pack_repack.go, which defines packEnv and
// rewritePacks (gc of packs: partly dead packs rewritten crash-safely). At the merge it is
// deleted and packedObjects.repack calls rewritePacks. Until then a dead packed object keeps
// its record in its pack: gc does not free the bytes of packed objects.

// packEnv is what rewritePacks works with (the definition pack_repack.go has).
//
//lint:ignore U1000 used by repack, which the collector calls once pack_repack.go is merged
type packEnv struct {
	be      Backend
	packs   PackBackend
	records Records
	log     *slog.Logger
	nextSeq func() uint64
}

// rewritePacksTODO has rewritePacks's signature and rewrites nothing.
//
//lint:ignore U1000 used by repack, which the collector calls once pack_repack.go is merged
func rewritePacksTODO(env packEnv, indexes []namedIndex, keep func(ID) bool) (string, error) {
	return "", nil
}
