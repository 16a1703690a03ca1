package local_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/backendtest"
	"github.com/weightfs/weightfs/store/local"
)

// TestLocalBackendContract runs the backend contract suite against the local directory, as
// store/s3's tests run it against a bucket.
func TestLocalBackendContract(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backendtest.Opener {
		root := filepath.Join(t.TempDir(), "store")
		if err := store.Init(root); err != nil {
			t.Fatal(err)
		}
		return func(t *testing.T, writer bool) store.Backend {
			info, err := os.Stat(filepath.Join(root, store.FormatFileName))
			if err != nil {
				t.Fatal(err)
			}
			return local.New(root, local.ModesFor(info.Mode()))
		}
	})
}
