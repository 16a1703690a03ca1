package store

import (
	"path/filepath"
	"testing"
)

// storedObject returns the stored bytes of object id (its file, or its record in a pack).
func storedObject(s *Store, id ID) ([]byte, error) {
	f, err := s.be.OpenObject(id)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if err := readFull(f, b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// The loose-objects knob: stores of the format-2 layout (every object its own file,
// objects/ab/<hex>; no packs), for the tests that damage or read object files directly. The
// store's format file says 2 and a writer leaves it so.

// newLooseStore is newStore for a store of format 2 that keeps loose objects.
func newLooseStore(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	if err := initStoreFormat(root, false, 2); err != nil {
		t.Fatal(err)
	}
	return openLoose(t, root, opts), root
}

// openLoose is openStore keeping loose objects.
func openLoose(t testing.TB, root string, opts Options) *Store {
	t.Helper()
	opts.looseObjects = true
	return openStore(t, root, opts)
}

// loose returns opts with the loose-objects knob set (for Open called directly).
func loose(opts Options) Options {
	opts.looseObjects = true
	return opts
}
