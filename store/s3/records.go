package s3

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/pack"
)

// The small records (store.Records) of an S3 store are small objects, each written by one
// PUT (atomic: a reader gets the old object or the new):
//
//   - the gc record (store/gc_record.go; docs/format.md Part I §4.4), PREFIX/dropped, written
//     by the writer alone, under its lease;
//   - a writer group's records (group.go), PREFIX/groups/NAME/..., written by the ranks and
//     the publisher;
//   - pack indexes (store format 3; records_index.go), PREFIX/index/NAME, immutable, written
//     by the writer under its lease or by a rank of a writer group, cached on local disk.
//
// Readers' pins are not kept: a reader of an S3 store does not pin (store.ErrPinUnsupported).

var _ store.Records = (*Backend)(nil)

// recordKey is the key of the record of that kind and name.
func (b *Backend) recordKey(kind store.RecordKind, name string) (string, error) {
	switch {
	case kind == store.RecordGC && name == store.GCRecordName:
		return b.c.loc.key(name), nil
	case kind == store.RecordGC:
		return "", fmt.Errorf("gc record %q: not a record's name", name)
	case kind == store.RecordGroup:
		return b.c.loc.key(groupsDir + name), nil
	case kind == store.RecordIndex:
		if _, ok := pack.ParseName(name); !ok {
			return "", fmt.Errorf("index record %q: not a pack index's name", name)
		}
		return b.c.loc.key(indexDir + name), nil
	}
	return "", fmt.Errorf("%s records: %w", kind, errors.ErrUnsupported)
}

// recordWhat names a record in messages.
func recordWhat(kind store.RecordKind, name string) string {
	if kind == store.RecordGC {
		return "gc record"
	}
	return string(kind) + " record " + name
}

func (b *Backend) RecordPath(kind store.RecordKind, name string) string {
	key, err := b.recordKey(kind, name)
	if err != nil {
		return ""
	}
	return b.c.name(key)
}

func (b *Backend) PutRecord(kind store.RecordKind, name string, data []byte) error {
	key, err := b.recordKey(kind, name)
	if err != nil {
		return err
	}
	if kind == store.RecordGC {
		if err := b.fence(true); err != nil {
			return fmt.Errorf("write gc record: %w", err)
		}
	}
	if kind == store.RecordIndex {
		return b.putIndex(key, name, data)
	}
	if _, err := b.c.putBytes(b.ctx, key, data, putCond{}); err != nil {
		return fmt.Errorf("write %s: %w", recordWhat(kind, name), err)
	}
	return nil
}

func (b *Backend) GetRecord(kind store.RecordKind, name string) ([]byte, error) {
	key, err := b.recordKey(kind, name)
	if err != nil {
		return nil, err
	}
	if kind == store.RecordIndex {
		return b.getIndex(key, name)
	}
	data, _, err := b.c.getBytes(b.ctx, key, nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", recordWhat(kind, name), err)
	}
	return data, nil
}

func (b *Backend) ListRecords(kind store.RecordKind) ([]string, error) {
	switch kind {
	case store.RecordGC:
		key, _ := b.recordKey(kind, store.GCRecordName)
		if _, _, err := b.c.stat(b.ctx, key); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("list gc records: %w", err)
		}
		return []string{store.GCRecordName}, nil
	case store.RecordGroup:
		var names []string
		err := b.c.list(b.ctx, groupsDir, func(rel string, _ int64) error {
			names = append(names, strings.TrimPrefix(rel, groupsDir))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("list group records: %w", err)
		}
		return names, nil
	case store.RecordIndex:
		return b.listIndexes()
	}
	_, err := b.recordKey(kind, "")
	return nil, err
}

func (b *Backend) DeleteRecord(kind store.RecordKind, name string) error {
	key, err := b.recordKey(kind, name)
	if err != nil {
		return err
	}
	if kind == store.RecordGC {
		if err := b.fence(true); err != nil {
			return fmt.Errorf("delete gc record: %w", err)
		}
	}
	if kind == store.RecordIndex {
		if err := b.fence(false); err != nil {
			return fmt.Errorf("delete %s: %w", recordWhat(kind, name), err)
		}
		os.Remove(b.indexCachePath(name))
	}
	if err := b.c.remove(b.ctx, key); err != nil {
		return fmt.Errorf("delete %s: %w", recordWhat(kind, name), err)
	}
	return nil
}
