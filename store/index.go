package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/weightfs/weightfs/store/format"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// index is the node-local bbolt index of one process: object representations (kind, base,
// chain depth and bytes), version summaries for `log`, and the state of the materialized
// copy. It is derived from the store: deleting it loses nothing (it refills lazily from
// object headers and manifests).
//
// So no failure of the index is allowed to become a failure of the store. Every call into
// bbolt goes through index.run, which turns what bbolt does with a damaged file (an error, a
// panic on a page it does not expect, a fault on its mapping: bbolt checks no page but the
// meta pages) into an error wrapping errIndexDamaged, in whichever goroutine it happens
// (reads run in the read-ahead's goroutines too). Every value carries a CRC-32C, so damage
// inside a record is found as well. On damage the file is closed, deleted and recreated,
// empty, with a log line, and the call is retried once on the new file; if it cannot be
// recreated the store runs without an index (every lookup misses, writes are dropped) and
// tries again a minute later.
type index struct {
	path  string
	owner indexOwner // the store it belongs to (index_identity.go)
	log   *slog.Logger

	mu      sync.Mutex
	db      *bolt.DB  // nil: running without an index until retryAt
	retryAt time.Time // when to try recreating a missing index again
	closed  bool

	recreated atomic.Int64 // times the index was found damaged and recreated (tests)
	writes    atomic.Int64 // read-write transactions committed (Stats.IndexWrites)
}

// writeCount is how many read-write transactions the index committed (0 for no index).
func (ix *index) writeCount() int64 {
	if ix == nil {
		return 0
	}
	return ix.writes.Load()
}

// indexFormat 2: every value ends in a CRC-32C (format/index.go). An index of another
// format, or of another store (meta/store, index_identity.go), is emptied at open.
const indexFormat = format.IndexFormat

var (
	bucketMeta     = []byte("meta")
	bucketObjects  = []byte("objects")
	bucketVersions = []byte("versions")
	keyFormat      = []byte("format")
	keyMaterial    = []byte("materialized")
	// keyOpen is set while a process has the index open: found set at open, the last
	// process died with it open, and bbolt's consistency check runs before it is used.
	keyOpen = []byte("open")
)

// objMeta is what planning and the anchor policy need of an object without opening it: the
// index's record of it (format/index.go has its bytes).
type objMeta = format.IndexObject

func decodeObjMeta(b []byte) (objMeta, bool) { return format.DecodeIndexObject(b) }

// matState is the state of the materialized copy: which version it holds and whether it is
// complete (Clean false: an update was interrupted, rebuild before use).
type matState struct {
	Version uint64 `json:"version"`
	Clean   bool   `json:"clean"`
}

// errIndexDamaged marks a failure of the index file itself (bbolt's error or panic, a
// record failing its CRC): the index is recreated. It never reaches the store's callers.
var errIndexDamaged = format.ErrIndexDamaged

// errIndexBusy is returned by Open when another process holds the index.
var errIndexBusy = errors.New("index is in use by another process (give each reader its own cache directory)")

// errNoIndex is what a call gets while the store runs without an index.
var errNoIndex = errors.New("running without an index")

// indexRetry is how long a store that could not recreate its index runs without one before
// it tries again.
const indexRetry = time.Minute

// openIndex opens the index at path of the store owner names, checking it with bbolt's
// consistency check when the last process that had it open did not close it. A damaged index
// is deleted and recreated, one of another format or of another store emptied (both logged);
// one that cannot be created leaves the store running without an index (logged). Only
// errIndexBusy (another process has it open) is an error.
func openIndex(path string, owner indexOwner, log *slog.Logger) (*index, error) {
	ix := &index{path: path, owner: owner, log: newLogger(log)}
	db, err := ix.tryOpen()
	switch {
	case err == nil:
		ix.db = db
	case errors.Is(err, errIndexBusy):
		return nil, err
	default:
		ix.mu.Lock()
		ix.recreateLocked(err)
		ix.mu.Unlock()
	}
	return ix, nil
}

// tryOpen opens and prepares the index file; any failure but errIndexBusy means the file is
// damaged.
func (ix *index) tryOpen() (*bolt.DB, error) {
	path := ix.path
	var db *bolt.DB
	err := guard(func() error {
		var err error
		// NoSync: the index is derived (every record is checked, a damaged file is recreated
		// from the manifests and object headers, and one not closed cleanly is checked at
		// open: prepareIndex), so a commit need not be durable; bbolt's two fsyncs per
		// write transaction were most of a version's fsyncs (bench figure moe).
		db, err = bolt.Open(path, cacheFilePerm, &bolt.Options{Timeout: 2 * time.Second, NoSync: true})
		return err
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open index %s: %w", path, errIndexBusy)
	}
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", path, markDamaged(err))
	}
	var reset string
	err = guard(func() (err error) {
		reset, err = prepareIndex(db, ix.owner)
		return err
	})
	if err != nil {
		closeIndexDB(db)
		return nil, fmt.Errorf("prepare index %s: %w", path, markDamaged(err))
	}
	if reset != "" {
		ix.log.Warn("index emptied: "+reset+"; it refills from the manifests and object headers", "index", path)
	}
	return db, nil
}

// prepareIndex checks the index when it was not closed cleanly, empties one of another
// format or of another store than owner's (and says why), creates the buckets, records
// owner's store and marks the index open.
func prepareIndex(db *bolt.DB, owner indexOwner) (reset string, err error) {
	unclean := false
	err = db.View(func(tx *bolt.Tx) error {
		// A file cut short of its pages: bbolt would read past its end (a fault), here or
		// in Tx.Check's own goroutine, which no guard covers.
		info, err := os.Stat(db.Path())
		if err != nil {
			return err
		}
		if info.Size() < tx.Size() {
			return fmt.Errorf("file of %d bytes holds pages up to %d: %w", info.Size(), tx.Size(), errIndexDamaged)
		}
		if meta := tx.Bucket(bucketMeta); meta != nil {
			unclean = meta.Get(keyOpen) != nil
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if unclean {
		// Walks every page once: bounded by the index's size (about 90 bytes an object).
		err = db.View(func(tx *bolt.Tx) error {
			var errs []error
			for err := range tx.Check() {
				errs = append(errs, err)
			}
			if len(errs) > 0 {
				return fmt.Errorf("consistency check after an unclean close: %w: %w", errors.Join(errs...), errIndexDamaged)
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta != nil {
			reset = owner.resetReason(meta.Get(keyFormat), meta.Get(keyStore))
		}
		if reset != "" {
			for _, b := range [][]byte{bucketMeta, bucketObjects, bucketVersions, bucketCopySums, bucketVouched} {
				if tx.Bucket(b) != nil {
					if err := tx.DeleteBucket(b); err != nil {
						return err
					}
				}
			}
		}
		for _, b := range [][]byte{bucketMeta, bucketObjects, bucketVersions, bucketCopySums, bucketVouched} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		meta = tx.Bucket(bucketMeta)
		if reset != "" {
			// What this store's writer marked dirty may have been recorded elsewhere: a
			// writer's next open sweeps, as after a recreation.
			if err := meta.Put(keyDirty, sealValue(keyDirty, []byte("1"))); err != nil {
				return err
			}
		}
		if err := meta.Put(keyStore, sealValue(keyStore, []byte(owner.Store))); err != nil {
			return err
		}
		if err := meta.Put(keyFormat, []byte(indexFormat)); err != nil {
			return err
		}
		return meta.Put(keyOpen, []byte("1"))
	})
	return reset, err
}

// guard runs f, which calls into bbolt, and turns a panic in it into an error wrapping
// errIndexDamaged. Faults on bbolt's mapping of the file (a page past the end of a
// truncated file: SIGBUS) become panics too, instead of killing the process: bbolt reads
// pages straight from the mapping, in the goroutine that calls it, so this is enough in any
// goroutine.
func guard(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bbolt panicked: %v: %w", r, errIndexDamaged)
		}
	}()
	return f()
}

// markDamaged wraps errIndexDamaged around an error of bbolt that says the file is damaged;
// others (a full disk, a read-only file system) pass unchanged: recreating would not help.
func markDamaged(err error) error {
	if err == nil || errors.Is(err, errIndexDamaged) {
		return err
	}
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EACCES, syscall.EPERM, errIndexBusy} {
		if errors.Is(err, e) {
			return err
		}
	}
	return fmt.Errorf("%w: %w", err, errIndexDamaged)
}

// run runs fn in a bbolt transaction (write: read-write) through guard. On damage it
// recreates the index and runs fn once more on the new, empty one, so callers see damage as
// missing entries, never as an error.
func (ix *index) run(write bool, fn func(tx *bolt.Tx) error) error {
	var err error
	for range 2 {
		db := ix.current()
		if db == nil {
			return errNoIndex
		}
		err = guard(func() error {
			if write {
				return db.Update(fn)
			}
			return db.View(fn)
		})
		if err == nil && write {
			ix.writes.Add(1)
		}
		if err == nil || !errors.Is(markDamaged(err), errIndexDamaged) {
			return err
		}
		ix.damaged(db, err)
	}
	return err
}

// current returns the open bbolt file, trying to recreate a missing one when it is time.
func (ix *index) current() *bolt.DB {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.db == nil && !ix.closed && time.Now().After(ix.retryAt) {
		ix.recreateLocked(nil)
	}
	return ix.db
}

// damaged recreates the index after a call on db found it damaged (once: other goroutines
// that found the same damage find db already replaced).
func (ix *index) damaged(db *bolt.DB, cause error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.db != db || ix.closed {
		return
	}
	ix.db = nil
	// In the background: Close waits for the transactions still running on it.
	go closeIndexDB(db)
	ix.recreateLocked(cause)
}

// recreateLocked deletes the index file and creates an empty index in its place (cause nil:
// a retry after an earlier failure). The new index is marked dirty, so that the writer's
// next open sweeps objects the lost flag may have covered. The caller holds ix.mu.
func (ix *index) recreateLocked(cause error) {
	if cause != nil {
		ix.recreated.Add(1)
	}
	err := os.Remove(ix.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		err = fmt.Errorf("delete it: %w", err)
	} else if ix.db, err = ix.tryOpen(); err == nil {
		err = guard(func() error {
			return ix.db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketMeta).Put(keyDirty, sealValue(keyDirty, []byte("1")))
			})
		})
	}
	if err != nil {
		if ix.db != nil {
			closeIndexDB(ix.db)
			ix.db = nil
		}
		ix.retryAt = time.Now().Add(indexRetry)
		if cause != nil {
			ix.log.Error("index is damaged; running without it (it cannot be recreated)", "index", ix.path, "damage", cause, "err", err)
		} else {
			ix.log.Warn("index: still running without it", "index", ix.path, "err", err)
		}
		return
	}
	if cause != nil {
		ix.log.Warn("index was damaged: deleted and recreated (it refills from the manifests and object headers)", "index", ix.path, "damage", cause)
	} else {
		ix.log.Info("index recreated (it refills from the manifests and object headers)", "index", ix.path)
	}
}

// closeIndexDB closes a bbolt file, whatever state it is in.
func closeIndexDB(db *bolt.DB) { _ = guard(db.Close) }

// close marks the index closed cleanly and closes it.
func (ix *index) close() error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.closed = true
	db := ix.db
	ix.db = nil
	if db == nil {
		return nil
	}
	err := guard(func() error {
		return db.Update(func(tx *bolt.Tx) error {
			b, err := bucket(tx, bucketMeta)
			if err != nil {
				return err
			}
			return b.Delete(keyOpen)
		})
	})
	if err := guard(db.Close); err != nil {
		return fmt.Errorf("close index %s: %w", ix.path, err)
	}
	if errors.Is(markDamaged(err), errIndexDamaged) {
		return nil // damaged: the next open recreates it
	}
	return err
}

// bucket returns a bucket of the index; a missing one is damage.
func bucket(tx *bolt.Tx, name []byte) (*bolt.Bucket, error) {
	b := tx.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("bucket %q missing: %w", name, errIndexDamaged)
	}
	return b, nil
}
