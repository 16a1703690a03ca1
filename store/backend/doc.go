// Package backend is the contract between a store and where it keeps its bytes: Backend,
// the open ObjectFile, and the optional parts every real backend has, PackBackend (packs)
// and Records (the small named records: the gc record, writer groups' records, readers'
// pins, pack indexes) with their RecordKind. Package store implements stores over it and
// names each type by the same name (store.Backend is backend.Backend); the backends are
// store/local (a directory) and store/s3 (a bucket), and store/backendtest holds each to the
// promises written here. The optional parts only store asks of a backend (a remote cache,
// quarantine, a change hint) are declared in store, beside the code that asks.
//
// It declares types only, and imports only store/format (identities), so that store, which
// opens local stores, and store/local, which implements this contract, both import it.
package backend
