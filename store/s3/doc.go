// Package s3 keeps a weightfs store in an S3 bucket (AWS or any S3-compatible service) under a
// key prefix, with the local layout's keys (docs/format.md, Part I): Backend implements
// store.Backend and store.RemoteCache, and Open, Init, ShowLease and BreakLease open, create
// and inspect a store at s3://bucket/prefix. store/location chooses between this package and
// a local directory from a STORE argument; nothing in package store imports this one (nor
// minio-go). It also keeps store format 3's packs and pack indexes (store.PackBackend, records
// of kind store.RecordIndex, store.PackCache: packs.go, records_index.go).
//
// What it owns: the client (minio-go, with this package's own retries with backoff, error
// classes and traffic counters: client.go, get.go), credentials (the AWS chain: creds.go),
// uploads in the background (upload.go) and downloads, ranged and parallel, each checked
// against the object's CRC-32C before it is kept (fetch.go), the local disk cache of objects,
// packs, manifests and pack indexes (objcache.go, backend.go, records_index.go) and its
// statistics (stats.go, Stats), and the writer's lease, built on conditional PUTs alone
// (lease.go), which Open hands to the store as its writer lock.
//
// What it does not own: what to fetch ahead and when to empty the cache. The store, which
// decodes manifests, decides that (store/cache_policy.go) and says it through
// store.RemoteCache (prefetch.go). ListManifests is a pure listing.
//
// Errors of S3 requests carry the cause's text but unwrap only to fs.ErrNotExist (a missing
// key) or to the store's sentinels (store.ErrLocked for a lost or held lease,
// store.ErrLeaseNotRenewed for a lease the bucket did not renew in time, store.ErrReadOnly, store.ErrClosed, store.ErrCorrupt): a network errno must not reach the
// FUSE layer, which would pass it to the kernel instead of EIO. docs/s3.md is the operator's
// manual (configuration, credentials, the lease and its limits).
package s3
