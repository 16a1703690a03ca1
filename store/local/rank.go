package local

import (
	"fmt"
	"os"
)

// RankBackend is the local backend of a rank of a writer group (store.OpenRank): its
// temporary object files live in groups/NAME/tmp/rank-R/, which only that rank cleans, so
// that the writer's clean-up of tmp/ at its open cannot take away a file a rank is writing.
type RankBackend struct {
	*Backend
	tmpDir string
}

// NewRank is b with its temporary files in tmpDir (made by CleanTemp).
func NewRank(b *Backend, tmpDir string) *RankBackend {
	return &RankBackend{Backend: b, tmpDir: tmpDir}
}

// CreateTemp creates a temporary file in the rank's directory.
func (b *RankBackend) CreateTemp() (*os.File, error) { return CreateTemp(b.tmpDir) }

// CleanTemp empties the rank's temporary directory (and makes it).
func (b *RankBackend) CleanTemp() error {
	if err := os.RemoveAll(b.tmpDir); err != nil {
		return fmt.Errorf("clean temporary files: %w", err)
	}
	return b.MkdirAll(b.tmpDir)
}
