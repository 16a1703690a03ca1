// Package local is the local directory backend of a store, a peer of store/s3: Backend (New)
// keeps a store in a directory and implements the contract of package store/backend
// (Backend, PackBackend, Records) and the optional parts store asks of a backend that can
// (quarantine of objects, manifests, packs and pack indexes; the fsync count; a pack's age;
// whether any loose object exists); RankBackend is a writer group's rank's backend.
// store.Open and store.OpenRank build them and open the store through store.OpenBackend,
// as store/s3's Open does with its own backend.
//
// Beneath the Backend are the layout of a store in a directory (fan-out paths of objects
// and packs), the modes of what a writer creates there, and the durable file operations
// every file of it is written and read with (a file put by fsync and rename, its directory
// fsynced; files opened only when regular; fan-out directories listed; fsyncs counted for
// Stats.Fsyncs), and the Syncer, a backend's memory of the directories it renamed files
// into and has yet to fsync (one fsync per directory for many puts, at SyncObjects).
//
// Files: backend.go (objects, manifests, temporary files), packs.go, records.go and
// groups.go (the small records), quarantine.go, loose.go, rank.go; files.go, durable.go,
// syncer.go and modes.go beneath them.
//
// It imports store/backend (the contract), store/format (identities, names, the sentinel
// errors) and store/pack (pack index names), never store: store imports it (its own tests
// open local stores), and its contract test, an external test package, imports store.
package local
