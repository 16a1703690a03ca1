package store

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/weightfs/weightfs/store/pack"
)

// namedIndex is a pack index as stored: its record name and what it says.
type namedIndex struct {
	Name string
	*pack.Index
}

// damagedIndex is a pack index record that exists but cannot be used, and why.
type damagedIndex struct {
	Name string
	Err  error
}

// loadIndexes reads every pack index of the store, in ascending order of sequence number
// (then name): the order in which their entries are laid over each other, so that the last
// entry of an id is the one that serves it. An index that fails its checks is returned among
// the damaged (wrapping ErrCorrupt or ErrUnsupportedVersion), not as an error: the packs it
// named are still found from their own tables (verify, repair). One that disappeared between
// the listing and its read (gc consolidated it) is skipped.
func loadIndexes(rec Records) ([]namedIndex, []damagedIndex, error) {
	if rec == nil {
		return nil, nil, nil
	}
	names, err := rec.ListRecords(RecordIndex)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(names, compareIndexNames)
	var good []namedIndex
	var bad []damagedIndex
	for _, name := range names {
		if _, ok := pack.ParseName(name); !ok {
			continue
		}
		x, err := loadIndex(rec, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupportedVersion) {
			bad = append(bad, damagedIndex{Name: name, Err: err})
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		good = append(good, x)
	}
	return good, bad, nil
}

// loadIndex reads and decodes one pack index record; its sequence number must be the one its
// name carries.
func loadIndex(rec Records, name string) (namedIndex, error) {
	b, err := rec.GetRecord(RecordIndex, name)
	if err != nil {
		return namedIndex{}, err
	}
	x, err := pack.DecodeIndex(b)
	if err != nil {
		return namedIndex{}, fmt.Errorf("pack index %s: %w", name, packError(err))
	}
	if seq, _ := pack.ParseName(name); seq != x.Seq {
		return namedIndex{}, fmt.Errorf("pack index %s holds sequence number %d: %w", name, x.Seq, ErrCorrupt)
	}
	return namedIndex{Name: name, Index: x}, nil
}

// compareIndexNames orders index names by sequence number, then by name.
func compareIndexNames(a, b string) int {
	sa, _ := pack.ParseName(a)
	sb, _ := pack.ParseName(b)
	switch {
	case sa < sb:
		return -1
	case sa > sb:
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// packError maps package pack's sentinels onto the store's.
func packError(err error) error {
	switch {
	case errors.Is(err, pack.ErrUnsupported):
		return fmt.Errorf("%w: %w", err, ErrUnsupportedVersion)
	case errors.Is(err, pack.ErrCorrupt):
		return fmt.Errorf("%w: %w", err, ErrCorrupt)
	}
	return err
}
