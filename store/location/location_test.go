package location

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/store"
)

// TestLocalStore: a path is a local store, created, opened and locked by package store;
// the writer's flock shows in ShowLease and cannot be broken; --shared is refused for S3
// before any request.
func TestLocalStore(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	if !IsLocal(root) || IsLocal("s3://bucket/prefix") {
		t.Fatal("IsLocal")
	}
	if err := Init(root, true, Options{}); err != nil {
		t.Fatal(err)
	}
	if info, err := ShowLease(root, Options{}); err != nil || info.Held {
		t.Fatalf("lease of an unopened store: %+v, %v", info, err)
	}
	w, err := Open(root, Options{Options: store.Options{Logger: logtest.New(t.Logf)}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if info, err := ShowLease(root, Options{}); err != nil || !info.Held || info.Owner != "" {
		t.Fatalf("lease of an open store: %+v, %v, want held by an unnamed flock holder", info, err)
	}
	if _, err := Open(root, Options{}); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("second writer: %v, want ErrLocked", err)
	}
	if _, err := BreakLease(root, Options{}); err == nil || !strings.Contains(err.Error(), "nothing to break") {
		t.Fatalf("break of a local lock: %v", err)
	}
	if err := Init("s3://bucket/prefix", true, Options{}); err == nil || !strings.Contains(err.Error(), "local stores") {
		t.Fatalf("shared S3 init: %v", err)
	}
}
