package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/weightfs/weightfs/store/backend"
	"github.com/weightfs/weightfs/store/format"
)

// The small records (backend.Records) of a local store, each kind in its place of the
// layout: the gc record STORE/dropped, group records below STORE/groups/ (groups.go),
// readers' pins STORE/pins/NAME.json, pack indexes STORE/index/NAME (packs.go).

// recordFile is the file of the record of that kind and name.
func (b *Backend) recordFile(kind backend.RecordKind, name string) (string, error) {
	valid := name != "" && name != "." && fs.ValidPath(name)
	switch {
	case kind == backend.RecordGC && name == format.GCRecordName:
		return filepath.Join(b.root, format.GCRecordName), nil
	case kind == backend.RecordGroup && valid:
		return b.recordPath(name), nil
	case kind == backend.RecordPin && valid && !strings.Contains(name, "/"):
		return filepath.Join(b.root, format.PinDir, name), nil
	case kind == backend.RecordIndex && name != "":
		return b.indexFile(name)
	case kind != backend.RecordGC && kind != backend.RecordGroup && kind != backend.RecordPin && kind != backend.RecordIndex:
		return "", fmt.Errorf("%s records: %w", kind, errors.ErrUnsupported)
	}
	return "", fmt.Errorf("%s record %q: not a record's name", kind, name)
}

// recordWhat names a record in messages.
func recordWhat(kind backend.RecordKind, name string) string {
	if kind == backend.RecordGC {
		return "gc record"
	}
	return string(kind) + " record " + name
}

func (b *Backend) RecordPath(kind backend.RecordKind, name string) string {
	p, _ := b.recordFile(kind, name)
	return p
}

func (b *Backend) PutRecord(kind backend.RecordKind, name string, data []byte) error {
	p, err := b.recordFile(kind, name)
	if err != nil {
		return err
	}
	switch kind {
	case backend.RecordGroup:
		err = b.putGroupRecord(p, data)
	case backend.RecordPin:
		err = putPinFile(p, data)
	case backend.RecordIndex:
		err = b.putIndexRecord(p, data)
	default:
		err = b.writeSynced(p, filepath.Join(b.root, "tmp"), data, b.modes.File)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", recordWhat(kind, name), err)
	}
	return nil
}

// putPinFile replaces a pin record: a temporary file beside it (not a record's name: it
// does not end in .json) renamed over it, so that gc never reads half a record. A pin is
// renewed every store.PinLease/4 and lives no longer than its reader: it is not synced.
func putPinFile(p string, data []byte) error {
	// Private, as the store (docs/format.md §1); a shared store gives it the group write bit.
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func (b *Backend) GetRecord(kind backend.RecordKind, name string) ([]byte, error) {
	p, err := b.recordFile(kind, name)
	if err != nil {
		return nil, err
	}
	// Looked at before it is read: reading a FIFO would block until a writer came.
	st, err := os.Lstat(p)
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s: %w (mode %v)", p, ErrNotRegular, st.Mode())
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(p)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", recordWhat(kind, name), err)
	}
	return data, nil
}

func (b *Backend) ListRecords(kind backend.RecordKind) ([]string, error) {
	switch kind {
	case backend.RecordGC:
		if _, err := os.Lstat(filepath.Join(b.root, format.GCRecordName)); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("list gc records: %w", err)
		}
		return []string{format.GCRecordName}, nil
	case backend.RecordGroup:
		return b.listGroupRecords()
	case backend.RecordPin:
		ents, err := os.ReadDir(filepath.Join(b.root, format.PinDir))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list pin records: %w", err)
		}
		var names []string
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".json") { // not a renewal's temporary file
				names = append(names, e.Name())
			}
		}
		return names, nil
	case backend.RecordIndex:
		return b.listIndexRecords()
	}
	_, err := b.recordFile(kind, "")
	return nil, err
}

func (b *Backend) DeleteRecord(kind backend.RecordKind, name string) error {
	p, err := b.recordFile(kind, name)
	if err != nil {
		return err
	}
	switch kind {
	case backend.RecordGroup:
		err = b.deleteGroupRecord(p)
	default:
		if err = os.Remove(p); errors.Is(err, fs.ErrNotExist) {
			err = nil
		} else if err == nil && kind == backend.RecordGC {
			err = b.fsyncDir(b.root)
		} else if err == nil && kind == backend.RecordIndex {
			err = b.fsyncDir(filepath.Dir(p))
		}
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", recordWhat(kind, name), err)
	}
	return nil
}
