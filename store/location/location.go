// Package location turns a STORE argument into a store: "s3://bucket/prefix" names a store
// in S3 (package store/s3), anything else a local directory (package store). Open, OpenRank,
// Init, ShowLease and BreakLease are the one place that chooses the backend; the CLI, the tests'
// mount daemon and the bench open and create stores through them.
//
// It is a package of its own, as restic's internal/backend/location is, because it is the
// only code that must know every kind of backend: store knows its local backend and the
// Backend contract, store/s3 knows S3 and imports store, and neither should import the
// other's siblings. A third backend (GCS, Azure, a shared POSIX file system) is a new
// package beside store/s3 and a new case here; nothing in store changes.
package location

import (
	"fmt"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/s3"
)

// Options configure Open: the store's options, and the S3 settings of an s3:// store (a
// local store ignores them).
type Options struct {
	store.Options
	// S3 configures a store at s3://bucket/prefix (endpoint, region, transfers, lease, the
	// local object cache). See s3.Config and docs/s3.md.
	S3 s3.Config
}

// IsLocal reports whether a STORE argument names a local directory (not s3://...).
func IsLocal(arg string) bool { return !s3.IsURL(arg) }

// Open opens the store arg names.
func Open(arg string, opts Options) (*store.Store, error) {
	if s3.IsURL(arg) {
		return s3.Open(arg, opts.S3, opts.Options)
	}
	return store.Open(arg, opts.Options)
}

// OpenRank opens the store arg names as rank r of a writer group (store.OpenRank,
// s3.OpenRank; docs/format.md Part I §9): it writes objects and its part records, never a
// manifest, and takes no writer's lock.
func OpenRank(arg string, r store.Rank, opts Options) (*store.Store, error) {
	if s3.IsURL(arg) {
		return s3.OpenRank(arg, opts.S3, r, opts.Options)
	}
	return store.OpenRank(arg, r, opts.Options)
}

// Init creates an empty store where arg says: a local directory (it must not exist or be
// empty; shared lets its group read it: store.InitShared), or s3://bucket/prefix (the bucket
// if it does not exist yet, and the format file; the prefix must hold no object).
func Init(arg string, shared bool, opts Options) error {
	switch {
	case s3.IsURL(arg) && shared:
		return fmt.Errorf("init %s: sharing is for local stores; an S3 store's readers are whoever its credentials admit", arg)
	case s3.IsURL(arg):
		return s3.Init(arg, opts.S3, opts.Logger)
	case shared:
		return store.InitShared(arg)
	}
	return store.Init(arg)
}

// ShowLease describes who holds the writer's lock of the store arg names. For a local store
// it reports whether a process holds the flock (Owner is then empty: flock does not say
// who).
func ShowLease(arg string, opts Options) (s3.LeaseInfo, error) {
	if s3.IsURL(arg) {
		return s3.ShowLease(arg, opts.S3, opts.Logger)
	}
	held, err := store.WriterLockHeld(arg)
	return s3.LeaseInfo{Held: held}, err
}

// BreakLease deletes the writer's lease of an S3 store, whoever holds it, and returns what
// it held (s3.BreakLease). A local store's flock needs no breaking: the kernel drops it when
// its holder exits.
func BreakLease(arg string, opts Options) (s3.LeaseInfo, error) {
	if !s3.IsURL(arg) {
		return s3.LeaseInfo{}, fmt.Errorf("%s is a local store: its writer lock is an flock, which the kernel releases when the writer exits; there is nothing to break", arg)
	}
	return s3.BreakLease(arg, opts.S3, opts.Logger)
}

// S3Stats returns the traffic counters of a store opened from s3:// (ok false: the store is
// local). It is here so that callers (the metrics) need not know the concrete backend type.
func S3Stats(st *store.Store) (s3.Stats, bool) {
	b, ok := st.Backend().(*s3.Backend)
	if !ok {
		return s3.Stats{}, false
	}
	return b.Stats(), true
}
