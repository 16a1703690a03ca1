package s3

import (
	"fmt"

	"github.com/weightfs/weightfs/store"
)

// The gc record (store/gcrecord.go; docs/format.md Part I §4.4) is one small object,
// PREFIX/dropped, written by one PUT (atomic: a reader gets the old object or the new) by
// the writer alone, under its lease.

var _ store.GCRecords = (*Backend)(nil)

func (b *Backend) gcRecordKey() string { return b.c.loc.key(store.GCRecordName) }

func (b *Backend) PutGCRecord(data []byte) error {
	if err := b.fence(true); err != nil {
		return fmt.Errorf("write gc record: %w", err)
	}
	if _, err := b.c.putBytes(b.ctx, b.gcRecordKey(), data, putCond{}); err != nil {
		return fmt.Errorf("write gc record: %w", err)
	}
	return nil
}

func (b *Backend) GetGCRecord() ([]byte, error) {
	data, _, err := b.c.getBytes(b.ctx, b.gcRecordKey(), nil)
	if err != nil {
		return nil, fmt.Errorf("read gc record: %w", err)
	}
	return data, nil
}
