package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/weightfs/weightfs/store/format"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The records of the index: every value is its payload followed by the CRC-32C of the key
// and the payload (format/index.go has the bytes); a record that fails its CRC is damage
// (errIndexDamaged): the index is recreated.

func sealValue(key, payload []byte) []byte { return format.SealIndexValue(key, payload) }

// openValue checks a stored value and returns its payload; a nil value is a miss (nil, nil).
func openValue(key, v []byte) ([]byte, error) { return format.OpenIndexValue(key, v) }

// get returns the payload of key in bucket name (nil: none).
func get(tx *bolt.Tx, name, key []byte) ([]byte, error) {
	b, err := bucket(tx, name)
	if err != nil {
		return nil, err
	}
	return openValue(key, b.Get(key))
}

func put(tx *bolt.Tx, name, key, payload []byte) error {
	b, err := bucket(tx, name)
	if err != nil {
		return err
	}
	return b.Put(key, sealValue(key, payload))
}

func (ix *index) object(id ID) (objMeta, bool) {
	var m objMeta
	var ok bool
	err := ix.run(false, func(tx *bolt.Tx) error {
		v, err := get(tx, bucketObjects, id[:])
		if err != nil || v == nil {
			return err
		}
		if m, ok = decodeObjMeta(v); !ok {
			return fmt.Errorf("object record %s: %w", id, errIndexDamaged)
		}
		return nil
	})
	return m, ok && err == nil
}

func (ix *index) putObjects(metas map[ID]objMeta) error {
	if len(metas) == 0 {
		return nil
	}
	ids := make([]ID, 0, len(metas))
	for id := range metas {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b ID) int { return bytes.Compare(a[:], b[:]) })
	return ix.write(func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketObjects)
		if err != nil {
			return err
		}
		for i := range ids {
			m := metas[ids[i]]
			if err := b.Put(ids[i][:], sealValue(ids[i][:], m.Encode())); err != nil {
				return err
			}
		}
		return nil
	})
}

// write runs a read-write transaction; without an index the write is dropped (the index
// is derived: what it would have held is found again from the store).
func (ix *index) write(fn func(tx *bolt.Tx) error) error {
	err := ix.run(true, fn)
	if errors.Is(err, errNoIndex) {
		return nil
	}
	return err
}

func (ix *index) deleteObjects(ids []ID) error {
	return ix.write(func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketObjects)
		if err != nil {
			return err
		}
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
	return ix.write(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketObjects); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return err
		}
		_, err := tx.CreateBucket(bucketObjects)
		return err
	})
}

func versionKey(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// versions returns the cached summaries of versions. A damaged or missing index has none
// (the caller reads the manifests): the error is always nil.
func (ix *index) versions() (map[uint64]VersionInfo, error) {
	out := map[uint64]VersionInfo{}
	err := ix.run(false, func(tx *bolt.Tx) error {
		clear(out)
		b, err := bucket(tx, bucketVersions)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			js, err := openValue(k, v)
			if err != nil {
				return err
			}
			var info VersionInfo
			if len(k) != 8 || json.Unmarshal(js, &info) != nil || info.Number != binary.BigEndian.Uint64(k) {
				return fmt.Errorf("version record %x: %w", k, errIndexDamaged)
			}
			out[info.Number] = info
			return nil
		})
	})
	if err != nil {
		clear(out)
	}
	return out, nil
}

// updateVersions adds and removes version summaries in one transaction.
func (ix *index) updateVersions(add []VersionInfo, del []uint64) error {
	if len(add) == 0 && len(del) == 0 {
		return nil
	}
	return ix.write(func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketVersions)
		if err != nil {
			return err
		}
		for _, info := range add {
			js, err := json.Marshal(info)
			if err != nil {
				return err
			}
			k := versionKey(info.Number)
			if err := b.Put(k, sealValue(k, js)); err != nil {
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

// materialized returns the recorded state of the materialized copy; nothing recorded, or a
// damaged or missing index, is the zero state (no copy: it is rebuilt).
func (ix *index) materialized() matState {
	var st matState
	ix.run(false, func(tx *bolt.Tx) error {
		st = matState{}
		js, err := get(tx, bucketMeta, keyMaterial)
		if err != nil || js == nil {
			return err
		}
		if json.Unmarshal(js, &st) != nil {
			st = matState{}
			return fmt.Errorf("materialized copy's record: %w", errIndexDamaged)
		}
		return nil
	})
	return st
}

func (ix *index) setMaterialized(st matState) error {
	js, _ := json.Marshal(st)
	return ix.write(func(tx *bolt.Tx) error { return put(tx, bucketMeta, keyMaterial, js) })
}

// reset empties the index (RebuildIndex).
func (ix *index) reset() error {
	return ix.write(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketObjects, bucketVersions} {
			if err := tx.DeleteBucket(name); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
				return err
			}
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		b, err := bucket(tx, bucketMeta)
		if err != nil {
			return err
		}
		return b.Delete(keyMaterial)
	})
}

// keyDirty is set while a writer has objects not yet in a manifest; an open that finds it
// set sweeps unreferenced objects.
var keyDirty = []byte("dirty")

// flag reports whether a flag is set. A damaged or missing index cannot say: the flag counts
// as set (the only flag, keyDirty, then costs a sweep, never a leftover).
func (ix *index) flag(key []byte) bool {
	set := true
	err := ix.run(false, func(tx *bolt.Tx) error {
		v, err := get(tx, bucketMeta, key)
		set = string(v) == "1"
		return err
	})
	return set || err != nil
}

func (ix *index) setFlag(key []byte, on bool) error {
	return ix.write(func(tx *bolt.Tx) error {
		if on {
			return put(tx, bucketMeta, key, []byte("1"))
		}
		b, err := bucket(tx, bucketMeta)
		if err != nil {
			return err
		}
		return b.Delete(key)
	})
}
