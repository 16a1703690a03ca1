package store

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/weightfs/weightfs/store/backend"
)

// The contract a backend keeps is package store/backend's (store/backend/backend.go): store
// names its types by the same names, so that a backend's callers in store, and store/s3,
// write store.Backend and mean backend.Backend.
type (
	// Backend is where a store keeps its bytes (backend.Backend).
	Backend = backend.Backend
	// ObjectFile is an open object (backend.ObjectFile).
	ObjectFile = backend.ObjectFile
	// PackBackend is the optional part of a Backend that keeps packs (backend.PackBackend).
	PackBackend = backend.PackBackend
	// Records is the optional part of a Backend that keeps small named records
	// (backend.Records).
	Records = backend.Records
	// RecordKind names a kind of records (backend.RecordKind).
	RecordKind = backend.RecordKind
)

// The kinds of records (backend.RecordGC and the others).
const (
	RecordGC    = backend.RecordGC
	RecordGroup = backend.RecordGroup
	RecordPin   = backend.RecordPin
	RecordIndex = backend.RecordIndex
)

// RemoteCache is the optional part of a Backend that keeps a local cache of a remote store
// (store/s3: a disk cache of objects and manifests). The store, which decodes manifests,
// decides what the cache should hold and tells it (cache_policy.go): the objects a new
// version needs before a reader's materialized copy moves to it, and the versions that
// disappeared (gc in another process, which may have replaced objects the cache holds).
type RemoteCache interface {
	// CachedVersions returns the versions whose manifests the cache holds: those this cache
	// directory has seen, in this process or an earlier one.
	CachedVersions() []uint64
	// CacheLimit is the byte bound of the cache of objects.
	CacheLimit() int64
	// IsCached reports whether object id is in the local cache (or waiting there for its
	// upload): reading it costs no request.
	IsCached(id ID) bool
	// Prefetch fetches the objects ids into the local cache, several at a time, and returns
	// the first error once all have ended.
	Prefetch(ids []ID) error
	// VersionsRemoved says that versions vs are gone from the remote store: the cache drops
	// their manifests and every cached object (objects are fetched again on demand).
	VersionsRemoved(vs []uint64)
}

// RemoteStat is the optional part of a Backend whose StatObject answers from what this
// process knows (store/s3's writer: one listing and its own puts since): StatRemote asks
// the storage itself, for an object another process put (a writer group's rank).
type RemoteStat interface {
	StatRemote(id ID) (int64, error)
}

// backendCaps is the store's backend and the optional parts it has, asserted once, at open
// (use): every call of the store on its backend goes through it.
type backendCaps struct {
	// Backend is what the store calls: the backend as opened or, when it keeps a local
	// cache of a remote store (RemoteCache), the store's cache policy around it
	// (cache_policy.go).
	Backend
	given      Backend       // the backend as opened (Store.Backend)
	policy     *cachePolicy  // the object cache's policy around given; nil: no RemoteCache
	quarantine Quarantiner   // nil: nothing can be moved aside (Repair refuses)
	records    Records       // nil: no gc record, no writer groups, no pins
	hinter     VersionHinter // nil: Poll lists every time
	remoteStat RemoteStat    // nil: StatObject asks the storage itself
	localDir   string        // the store's local directory; "" for a store elsewhere (S3)
	fsyncer    fsyncCounter  // nil: the backend counts no fsyncs (Stats.Fsyncs is 0)
	// packs is the pack layer (pack_layer.go), which Backend is when set: nil when the
	// backend keeps no packs (no PackBackend or no Records) or the store writes loose
	// objects (Options.looseObjects).
	packs *packedObjects
}

// fsyncCounter is the optional part of a Backend that counts the fsyncs it made (the local
// backend): Stats.Fsyncs.
type fsyncCounter interface{ Fsyncs() int64 }

// fsyncs is how many fsyncs the backend made, as far as it counts them.
func (b *backendCaps) fsyncs() int64 {
	if b == nil || b.fsyncer == nil {
		return 0
	}
	return b.fsyncer.Fsyncs()
}

// use asserts be's optional parts. A backend with a local cache of a remote store goes
// behind the cache policy, which prefetches a new version's objects when prefetch is set
// (a reader that keeps a materialized copy).
func (b *backendCaps) use(be Backend, prefetch bool, root string, log *slog.Logger) {
	*b = backendCaps{Backend: be, given: be}
	if rc, ok := be.(RemoteCache); ok {
		b.policy = newCachePolicy(be, rc, prefetch, root, log)
		b.Backend = b.policy
	}
	// A backend of another package quarantines through the cache policy (Quarantiner); a
	// policy around one that cannot leaves none.
	if q, ok := b.Backend.(Quarantiner); ok {
		if c, wraps := b.Backend.(interface{ canQuarantine() bool }); !wraps || c.canQuarantine() {
			b.quarantine = q
		}
	}
	b.records, _ = be.(Records)
	b.hinter, _ = be.(VersionHinter)
	b.remoteStat, _ = be.(RemoteStat)
	b.fsyncer, _ = be.(fsyncCounter)
	if l, ok := be.(localDirBackend); ok {
		b.localDir = l.LocalDir()
	}
}

// usePacks puts the pack layer in front of the store's backend when the backend keeps packs
// and records (store format 3): every call of the store on its objects then goes through it.
// loose (a test's knob) makes the layer write loose objects (the format-2 layout); it still
// reads the packs a store has, so that a store with packs opened with the knob never takes
// its packed objects for missing ones (and its repair never moves their versions aside).
func (b *backendCaps) usePacks(loose bool, log *slog.Logger) error {
	pb, ok := b.given.(PackBackend)
	if !ok || b.records == nil {
		return nil
	}
	p, err := newPackedObjects(b.Backend, pb, b.records, log)
	if err != nil {
		return err
	}
	p.loose = loose
	b.packs = p
	b.Backend = p
	if b.policy != nil {
		b.policy.setPacksOf(p.packsOf)
	}
	return nil
}

// unsealedIndexes are the pack indexes this process wrote that no manifest (or part record)
// it wrote names yet (none without packs).
func (b *backendCaps) unsealedIndexes() ([]string, error) {
	if b.packs == nil {
		return nil, nil
	}
	return b.packs.syncIndexes()
}

// loadIndexes has the pack layer load the pack indexes names (other processes wrote them).
func (b *backendCaps) loadIndexes(names []string) error {
	if b.packs == nil {
		return nil
	}
	return b.packs.loadNamed(names)
}

// reloadIndexes has the pack layer read every pack index of the store again.
func (b *backendCaps) reloadIndexes() error {
	if b.packs == nil {
		return nil
	}
	return b.packs.reload()
}

// sealedIndexes says that names are now in a durable manifest or part record.
func (b *backendCaps) sealedIndexes(names []string) {
	if b.packs != nil && len(names) > 0 {
		b.packs.sealedIndexes(names)
	}
}

// mergeIndexNames is the sorted union of lists of pack index names.
func mergeIndexNames(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	slices.SortFunc(out, compareIndexNames)
	return slices.Compact(out)
}

// CheckObject verifies a whole object file against its CRC-32C trailer (docs/format.md):
// a backend that fetched an object checks the bytes it got before it keeps them.
func CheckObject(f ObjectFile) error { return checkCRC(f) }

// CheckCachedObject verifies a whole object file as CheckObject does and that its header
// names id: a backend checks what it kept of an object on local disk (which anything may
// have damaged, or put another object's file in its place) before it serves it, and fetches
// the object again if it fails.
func CheckCachedObject(id ID, f ObjectFile) error {
	if err := checkCRC(f); err != nil {
		return objectError(id, err)
	}
	info, err := readObjectInfo(f)
	if err == nil && info.hdr.ID != id {
		err = fmt.Errorf("file holds object %s: %w", info.hdr.ID, ErrCorrupt)
	}
	if err != nil {
		return objectError(id, err)
	}
	return nil
}

// CheckCachedManifest checks manifest bytes of version v as the version list does (magic,
// format, length, CRC-32C, the version number it names): a backend checks a manifest it
// kept on local disk before it serves it, and fetches it again if it fails.
func CheckCachedManifest(v uint64, data []byte) error {
	info, err := decodeManifestSummary(data)
	if err != nil {
		return fmt.Errorf("manifest of version %d: %w", v, err)
	}
	if info.Number != v {
		return fmt.Errorf("manifest of version %d names version %d: %w", v, info.Number, ErrCorrupt)
	}
	return nil
}

// ManifestName is the name of version v's manifest in a store's layout (versions/NAME on
// disk, PREFIX/versions/NAME in S3): "v" and the number, zero-padded to six digits.
func ManifestName(v uint64) string { return manifestName(v) }

// ParseManifestName is the inverse of ManifestName; ok is false for any other name.
func ParseManifestName(name string) (v uint64, ok bool) { return parseManifestName(name) }
