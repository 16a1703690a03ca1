package store_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/internal/testfiles"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
)

// TestPatchedVersionsOnS3 (issue 31 item 5, S3): versions 2-4 of a store on the S3 test server
// come in as patches (CommitPatch, what a trainer writes into patches/); a read-only store of
// the same bucket, opened before them, sees each after a Refresh, reads every file of every
// version back byte for byte, and verifies.
func TestPatchedVersionsOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	url := "s3://weightfs-test/patched"
	if err := location.Init(url, false, location.Options{}); err != nil {
		t.Fatal(err)
	}
	series := testfiles.ShardedSeries(t, 4, 31)

	// The patches come from a local store that ingested every version whole.
	local := filepath.Join(t.TempDir(), "store")
	if err := location.Init(local, false, location.Options{}); err != nil {
		t.Fatal(err)
	}
	full := openLocation(t, local, store.Options{})
	for i, files := range series {
		sealWhole(t, full, uint64(i+1), files)
	}

	writer := openLocation(t, url, store.Options{})
	sealWhole(t, writer, 1, series[0])
	reader := openLocation(t, url, store.Options{ReadOnly: true})
	for v := uint64(2); v <= 4; v++ {
		patch, err := os.Create(filepath.Join(t.TempDir(), "patch"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := full.WritePatch(v, patch)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := writer.CommitPatch(patch, n, v); err != nil {
			t.Fatalf("patch to version %d: %v", v, err)
		}
		patch.Close()
		if err := reader.Refresh(); err != nil {
			t.Fatal(err)
		}
		if latest, _ := reader.Latest(); latest != v {
			t.Fatalf("the reader's latest version after version %d came in as a patch: %d", v, latest)
		}
	}
	for v := uint64(1); v <= 4; v++ {
		for _, name := range namesOf(series[v-1]) {
			f, err := reader.OpenFile(v, name)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, f.Size())
			if _, err := f.ReadAt(got, 0); err != nil {
				t.Fatalf("v%d %s: %v", v, name, err)
			}
			f.Close()
			if !bytes.Equal(got, series[v-1][name]) {
				t.Fatalf("v%d %s: the bytes read from S3 differ from the version's", v, name)
			}
		}
	}
	if rep, err := reader.Verify(nil); err != nil || rep.Versions != 4 {
		t.Fatalf("verify of the bucket whose versions came as patches: %d versions, %v", rep.Versions, err)
	}
}

// sealWhole seals files as version v of s.
func sealWhole(t *testing.T, s *store.Store, v uint64, files map[string][]byte) {
	t.Helper()
	w, err := s.NewVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range namesOf(files) {
		if err := w.AddFile(n, bytes.NewReader(files[n]), int64(len(files[n])), 0o644); err != nil {
			t.Fatal(fmt.Errorf("v%d %s: %w", v, n, err))
		}
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
}
