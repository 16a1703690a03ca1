package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// index is the node-local bbolt index of one process: object representations (kind, base,
// chain depth and bytes), version summaries for `log`, and the state of the materialized
// copy. It is derived from the store: deleting it loses nothing (it is rebuilt lazily from
// object headers and manifests), and a damaged one is deleted and rebuilt at open.
type index struct {
	db   *bolt.DB
	path string
}

const indexFormat = "1"

var (
	bucketMeta     = []byte("meta")
	bucketObjects  = []byte("objects")
	bucketVersions = []byte("versions")
	keyFormat      = []byte("format")
	keyMaterial    = []byte("materialized")
)

// objMeta is what planning and the anchor policy need of an object without opening it.
type objMeta struct {
	Kind       objectKind
	Width      int
	Base       ID // delta: its base; full: the base of its link (zero: none)
	ContentLen int64
	FileSize   int64
	DeltaLen   int64
	// Depth counts the deltas between this object and the nearest whole copy it is built
	// from (0 for a full object); ChainBytes sums their delta sections.
	Depth      int
	ChainBytes int64
}

const objMetaLen = 1 + 1 + 32 + 8 + 8 + 8 + 4 + 8

func (m *objMeta) encode() []byte {
	b := make([]byte, 0, objMetaLen)
	b = append(b, byte(m.Kind), byte(m.Width))
	b = append(b, m.Base[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(m.ContentLen))
	b = binary.LittleEndian.AppendUint64(b, uint64(m.FileSize))
	b = binary.LittleEndian.AppendUint64(b, uint64(m.DeltaLen))
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Depth))
	return binary.LittleEndian.AppendUint64(b, uint64(m.ChainBytes))
}

func decodeObjMeta(b []byte) (objMeta, bool) {
	var m objMeta
	if len(b) != objMetaLen {
		return m, false
	}
	m.Kind, m.Width = objectKind(b[0]), int(b[1])
	copy(m.Base[:], b[2:34])
	m.ContentLen = int64(binary.LittleEndian.Uint64(b[34:]))
	m.FileSize = int64(binary.LittleEndian.Uint64(b[42:]))
	m.DeltaLen = int64(binary.LittleEndian.Uint64(b[50:]))
	m.Depth = int(binary.LittleEndian.Uint32(b[58:]))
	m.ChainBytes = int64(binary.LittleEndian.Uint64(b[62:]))
	return m, m.Kind == kindFull || m.Kind == kindDelta
}

// matState is the state of the materialized copy: which version it holds and whether it is
// complete (Clean false: an update was interrupted, rebuild before use).
type matState struct {
	Version uint64 `json:"version"`
	Clean   bool   `json:"clean"`
}

// openIndex opens (creating or, when damaged or of another format, recreating) the index at
// path.
func openIndex(path string) (*index, error) {
	ix, err := tryOpenIndex(path)
	if err == nil {
		return ix, nil
	}
	if errors.Is(err, errIndexBusy) {
		return nil, err
	}
	// The index is derived: a damaged one is dropped, not repaired.
	if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		return nil, fmt.Errorf("drop damaged index %s (%v): %w", path, err, rmErr)
	}
	return tryOpenIndex(path)
}

var errIndexBusy = errors.New("index is in use by another process (give each reader its own cache directory)")

func tryOpenIndex(path string) (*index, error) {
	db, err := bolt.Open(path, cacheFilePerm, &bolt.Options{Timeout: 2 * time.Second})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open index %s: %w", path, errIndexBusy)
	}
	if err != nil {
		return nil, fmt.Errorf("open index %s: %w", path, err)
	}
	ix := &index{db: db, path: path}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta != nil && string(meta.Get(keyFormat)) != indexFormat {
			for _, b := range [][]byte{bucketMeta, bucketObjects, bucketVersions} {
				if tx.Bucket(b) != nil {
					if err := tx.DeleteBucket(b); err != nil {
						return err
					}
				}
			}
		}
		for _, b := range [][]byte{bucketMeta, bucketObjects, bucketVersions} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyFormat, []byte(indexFormat))
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("prepare index %s: %w", path, err)
	}
	return ix, nil
}

func (ix *index) close() error { return ix.db.Close() }

func (ix *index) object(id ID) (objMeta, bool) {
	var m objMeta
	var ok bool
	ix.db.View(func(tx *bolt.Tx) error {
		m, ok = decodeObjMeta(tx.Bucket(bucketObjects).Get(id[:]))
		return nil
	})
	return m, ok
}

func (ix *index) putObjects(metas map[ID]objMeta) error {
	if len(metas) == 0 {
		return nil
	}
	return ix.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketObjects)
		for id, m := range metas {
			if err := b.Put(id[:], m.encode()); err != nil {
				return err
			}
		}
		return nil
	})
}

func (ix *index) deleteObjects(ids []ID) error {
	return ix.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketObjects)
		for _, id := range ids {
			if err := b.Delete(id[:]); err != nil {
				return err
			}
		}
		return nil
	})
}

// clearObjects drops every object entry (they refill lazily from object headers).
func (ix *index) clearObjects() error {
	return ix.db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketObjects); err != nil {
			return err
		}
		_, err := tx.CreateBucket(bucketObjects)
		return err
	})
}

func versionKey(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// versions returns the cached summaries of versions.
func (ix *index) versions() (map[uint64]VersionInfo, error) {
	out := map[uint64]VersionInfo{}
	err := ix.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketVersions).ForEach(func(k, v []byte) error {
			var info VersionInfo
			if len(k) == 8 && json.Unmarshal(v, &info) == nil && info.Number == binary.BigEndian.Uint64(k) {
				out[info.Number] = info
			}
			return nil
		})
	})
	return out, err
}

// updateVersions adds and removes version summaries in one transaction.
func (ix *index) updateVersions(add []VersionInfo, del []uint64) error {
	if len(add) == 0 && len(del) == 0 {
		return nil
	}
	return ix.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketVersions)
		for _, info := range add {
			js, err := json.Marshal(info)
			if err != nil {
				return err
			}
			if err := b.Put(versionKey(info.Number), js); err != nil {
				return err
			}
		}
		for _, v := range del {
			if err := b.Delete(versionKey(v)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (ix *index) materialized() matState {
	var st matState
	ix.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketMeta).Get(keyMaterial); b != nil {
			if json.Unmarshal(b, &st) != nil {
				st = matState{}
			}
		}
		return nil
	})
	return st
}

func (ix *index) setMaterialized(st matState) error {
	js, _ := json.Marshal(st)
	return ix.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyMaterial, js) })
}

// reset empties the index (RebuildIndex).
func (ix *index) reset() error {
	return ix.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketObjects, bucketVersions} {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Delete(keyMaterial)
	})
}

// keyDirty is set while a writer has objects not yet in a manifest; an open that finds it
// set sweeps unreferenced objects.
var keyDirty = []byte("dirty")

func (ix *index) flag(key []byte) bool {
	var set bool
	ix.db.View(func(tx *bolt.Tx) error {
		set = string(tx.Bucket(bucketMeta).Get(key)) == "1"
		return nil
	})
	return set
}

func (ix *index) setFlag(key []byte, on bool) error {
	return ix.db.Update(func(tx *bolt.Tx) error {
		if on {
			return tx.Bucket(bucketMeta).Put(key, []byte("1"))
		}
		return tx.Bucket(bucketMeta).Delete(key)
	})
}
