// Package store owns the versioned, content-indexed store of weights: immutable objects named
// by the SHA-256 of their content (whole, or as sparse deltas against the previous version of
// the same tensor), version manifests written last, the node-local bbolt index, the
// materialized copy of the latest version, ingest (batch and streaming), reads of any version
// at any offset, verification and garbage collection.
//
// It knows nothing of FUSE. A Store is safe for concurrent use. Exactly one process may write a
// store at a time (an exclusive lock); any number may read it, each with its own index and
// cache directory.
package store
