package store_test

import (
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/backendtest"
)

// TestLocalBackendContract runs the backend contract suite against the local directory.
func TestLocalBackendContract(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Opener {
		root := filepath.Join(t.TempDir(), "store")
		if err := store.Init(root); err != nil {
			t.Fatal(err)
		}
		return func(t *testing.T, writer bool) store.Backend {
			b, err := store.NewLocalBackend(root)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	})
}
