package backend

import (
	"io"
	"os"

	"github.com/weightfs/weightfs/store/format"
)

// Backend is where a store keeps its bytes, and all the store asks of it: the local
// directory (package store/local) and S3 (package store/s3) implement it, and one contract
// suite (package store/backendtest) holds every implementation to the promises below.
// Implementations are safe for concurrent use. docs/design.md ("Backends") says why the
// contract is this small.
//
// Objects are immutable and named by their ID. A backend may replace an object with another
// file of the same ID (same content, other representation: GC re-anchors a delta as a whole
// copy); the replacement is atomic: a reader opens the old file or the new one, never a mix.
type Backend interface {
	// CreateTemp returns a new temporary file for an object being written; the caller either
	// passes it to PutObject or removes it (RemoveTemp).
	CreateTemp() (*os.File, error)
	// RemoveTemp closes and deletes a temporary file that will not become an object.
	RemoveTemp(f *os.File)
	// PutObject makes the fully written temporary file tmp the object id, atomically, and
	// takes ownership of tmp. The object is durable once SyncObjects returns.
	PutObject(id format.ID, tmp *os.File) error
	// SyncObjects makes every object put so far durable (on the local backend: fsync of the
	// object directories that gained entries; on S3: every upload has ended).
	SyncObjects() error
	// OpenObject opens an object for random access. A missing object is an error wrapping
	// fs.ErrNotExist.
	OpenObject(id format.ID) (ObjectFile, error)
	// StatObject returns the size of an object's file (fs.ErrNotExist if there is none).
	StatObject(id format.ID) (int64, error)
	// ListObjects calls fn for every object, in no particular order.
	ListObjects(fn func(id format.ID, size int64) error) error
	// DeleteObject removes an object; a missing one is not an error.
	DeleteObject(id format.ID) error
	// PutManifest stores the manifest of version v durably and atomically: after it returns
	// the version exists; after a crash during it, it exists whole or not at all.
	PutManifest(v uint64, data []byte) error
	// GetManifest returns the manifest bytes of version v (fs.ErrNotExist if there is none).
	GetManifest(v uint64) ([]byte, error)
	// ListManifests lists the versions that have a manifest, ascending. It is a pure
	// listing: it changes nothing, in the store or in a local cache.
	ListManifests() ([]uint64, error)
	// DeleteManifest removes a version's manifest durably; a missing one is not an error.
	DeleteManifest(v uint64) error
	// CleanTemp removes leftover temporary files (the writer calls it at open).
	CleanTemp() error
	// Close ends the backend's background work (a remote backend's transfers: objects not
	// yet uploaded belong to no sealed version). The store calls it once, at its Close,
	// after every other call has returned.
	Close() error
}

// ObjectFile is an open object: random access to its stored bytes.
type ObjectFile interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// PackBackend is the optional part of a Backend that keeps packs (store format 3; the bytes
// are package store/pack, docs/format.md Part I §3.5): files of many objects each, named by
// the SHA-256 of their table. The store's pack layer (store's pack_*.go) writes objects into
// packs and finds them through pack indexes (records of kind RecordIndex); the backend only
// keeps the files. Packs are immutable, like objects.
type PackBackend interface {
	// PutPack makes the fully written temporary file tmp (from CreateTemp) the pack id and
	// takes ownership of tmp. The pack is durable once SyncObjects returns.
	PutPack(id format.ID, tmp *os.File) error
	// OpenPack opens a pack for random access. A missing pack is an error wrapping
	// fs.ErrNotExist.
	OpenPack(id format.ID) (ObjectFile, error)
	// StatPack returns the size of a pack (fs.ErrNotExist if there is none).
	StatPack(id format.ID) (int64, error)
	// ListPacks calls fn for every pack, in no particular order.
	ListPacks(fn func(id format.ID, size int64) error) error
	// DeletePack removes a pack; a missing one is not an error.
	DeletePack(id format.ID) error
}

// Records is the optional part of a Backend that keeps small named records beside the
// objects and manifests: the records both real backends keep (the local one and store/s3),
// each kind in its own place of the store's layout (docs/format.md Part I §1):
//
//	RecordGC     STORE/dropped, PREFIX/dropped: the gc record (store's gc_record.go), one record named format.GCRecordName
//	RecordGroup  STORE/groups/NAME, PREFIX/groups/NAME: a writer group's records (store's group.go)
//	RecordPin    STORE/pins/NAME: readers' pins (store's gc_pins.go); store/s3 holds none
//	RecordIndex  STORE/index/NAME, PREFIX/index/NAME: pack indexes (format 3, store's pack_*.go); immutable, durable on return
//
// A kind a backend does not keep is refused with an error wrapping errors.ErrUnsupported (a
// store without the gc record, writer groups or pins goes on without them). A backend
// without Records keeps none.
type Records interface {
	// PutRecord stores a record atomically, replacing one of that kind and name: a reader
	// gets the old bytes or the new, never a mix. The gc record and group records are
	// durable when it returns; a pin, renewed every store.PinLease/4, need not outlive a crash.
	PutRecord(kind RecordKind, name string, data []byte) error
	// GetRecord returns a record's bytes (fs.ErrNotExist if there is none).
	GetRecord(kind RecordKind, name string) ([]byte, error)
	// ListRecords lists the names of a kind's records, in no particular order. Names that
	// are not records' (temporary files) may be listed too; callers parse them.
	ListRecords(kind RecordKind) ([]string, error)
	// DeleteRecord removes a record (durably, but for a pin); a missing one is not an error.
	DeleteRecord(kind RecordKind, name string) error
	// RecordPath says where a record of that kind and name is (a path, a URL), for messages.
	RecordPath(kind RecordKind, name string) string
}

// RecordKind names a kind of the small records a backend keeps (Records).
type RecordKind string

// The kinds of records.
const (
	RecordGC    RecordKind = "gc"
	RecordGroup RecordKind = "group"
	RecordPin   RecordKind = "pin"
	RecordIndex RecordKind = "index"
)
