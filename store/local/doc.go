// Package local is the local directory half of a store's backends, beside store/s3: the
// layout of a store in a directory (fan-out paths of objects and packs), the modes of what
// a writer creates there, and the durable file operations every file of it is written and
// read with (a file put by fsync and rename, its directory fsynced; files opened only when
// regular; fan-out directories listed; fsyncs counted for Stats.Fsyncs), and the Syncer, a
// local backend's memory of the directories it renamed files into and has yet to fsync (one
// fsync per directory for many puts, at SyncObjects).
//
// What is not here yet is the Backend itself: package store's localBackend
// (store/backend_local*.go) implements store.Backend, Records, PackBackend and quarantine
// over these functions. It stays in store while store's own tests, which open local stores,
// are inside package store (a package local that imported store could not be imported
// back) and while the contract's types (Backend, ObjectFile, Records, RecordKind, the
// quarantine interfaces) are store's; moving them to a package both import is the next step
// (docs/design.md, "Backends").
//
// It imports only store/format (identities, the sentinel errors), never store.
package local
