package store

import (
	"os"
	"path/filepath"
	"time"
)

// SetClock fixes the clock of s's manifests' creation times, for tests outside the package
// (store_test) that pin stored bytes.
func SetClock(s *Store, now func() time.Time) { s.ingest.now = now }

// NewLocalBackend opens the backend of the local store at root (made by Init), for the
// store's own tests.
func NewLocalBackend(root string) (Backend, error) {
	info, err := os.Stat(filepath.Join(root, formatFileName))
	if err != nil {
		return nil, err
	}
	return newLocalBackend(root, modesFor(info.Mode())), nil
}

// SetContextChain sets the most version-2 delta sections a chain of contexts may hold when s
// writes a new one (0: s writes version-1 sections only), for tests outside the package.
func SetContextChain(s *Store, n int) { s.objects.contextChain = n }

// LooseObjects returns opts set to keep the layout of store format 2 (loose object files, no
// packs), for tests outside the package that damage object files.
func LooseObjects(opts Options) Options {
	opts.looseObjects = true
	return opts
}

// InitFormat2 makes an empty store of format 2 (for LooseObjects).
func InitFormat2(path string) error { return initStoreFormat(path, false, 2) }
