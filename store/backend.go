package store

import (
	"io"
	"os"
)

// Backend is where a store keeps its bytes. The local-directory backend is the only one now;
// an S3 backend with the same layout comes later, so everything the store does to its files
// goes through this small interface. Implementations are safe for concurrent use.
//
// Objects are immutable and named by their ID. A backend may replace an object with another
// file of the same ID (same content, other representation: GC re-anchors a delta as a whole
// copy); the replacement is atomic.
type Backend interface {
	// CreateTemp returns a new temporary file for an object being written; the caller either
	// passes it to PutObject or removes it (RemoveTemp).
	CreateTemp() (*os.File, error)
	// RemoveTemp closes and deletes a temporary file that will not become an object.
	RemoveTemp(f *os.File)
	// PutObject makes the fully written temporary file tmp the object id, atomically, and
	// takes ownership of tmp. The object is durable once SyncObjects returns.
	PutObject(id ID, tmp *os.File) error
	// SyncObjects makes every object put so far durable (on the local backend: fsync of the
	// object directories that gained entries).
	SyncObjects() error
	// OpenObject opens an object for random access. A missing object is an error wrapping
	// fs.ErrNotExist.
	OpenObject(id ID) (ObjectFile, error)
	// StatObject returns the size of an object's file (fs.ErrNotExist if there is none).
	StatObject(id ID) (int64, error)
	// ListObjects calls fn for every object, in no particular order.
	ListObjects(fn func(id ID, size int64) error) error
	// DeleteObject removes an object; a missing one is not an error.
	DeleteObject(id ID) error
	// PutManifest stores the manifest of version v durably and atomically: after it returns
	// the version exists; after a crash during it, it exists whole or not at all.
	PutManifest(v uint64, data []byte) error
	// GetManifest returns the manifest bytes of version v (fs.ErrNotExist if there is none).
	GetManifest(v uint64) ([]byte, error)
	// ListManifests lists the versions that have a manifest, ascending.
	ListManifests() ([]uint64, error)
	// DeleteManifest removes a version's manifest durably.
	DeleteManifest(v uint64) error
	// CleanTemp removes leftover temporary files (the writer calls it at open).
	CleanTemp() error
}

// ObjectFile is an open object: random access to its stored bytes.
type ObjectFile interface {
	io.ReaderAt
	Size() int64
	Close() error
}
