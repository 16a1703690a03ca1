package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/internal/testfiles"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
)

// storedBytesSHA256 is the hash of every object and manifest (name and bytes) that
// TestStoredBytesPinned's series stores. It was recorded on the code before the S3 backend
// moved out of the core into store/s3 (docs/design.md, "Backends"); the same value after the
// move shows that the move changed no byte of any object or manifest, on either backend. A
// change of it is a change of the stored format: docs/format.md first.
const storedBytesSHA256 = "c069bb38339175d5fd0ee946d2e08f1e258b0474222df34eba7b8cd063741db4"

// TestStoredBytesPinned commits a fixed generated series (a batch commit, a streamed
// version, a staged one, a batch one again) into a local store and into an S3 store on the
// test server, with the manifests' clock fixed, and hashes what each stored.
func TestStoredBytesPinned(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	const bucket, prefix = "weightfs-test", "pinned-bytes"
	url := "s3://" + bucket + "/" + prefix
	if err := location.Init(url, false, location.Options{}); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "store")
	if err := location.Init(local, false, location.Options{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, path, dir string }{
		{"local", local, local},
		{"s3", url, srv.ObjectDir(bucket, prefix)},
	} {
		s, err := location.Open(c.path, location.Options{Options: store.Options{CacheDir: t.TempDir(), Logger: logtest.New(t.Logf)}})
		if err != nil {
			t.Fatal(err)
		}
		commitPinnedSeries(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := storedBytesHash(t, c.dir); got != storedBytesSHA256 {
			t.Errorf("%s store: objects and manifests hash to %s, want %s", c.name, got, storedBytesSHA256)
		}
	}
}

// commitPinnedSeries stores four versions of a small generated model (fixed seed):
// v1 and v4 by Commit, v2 streamed, v3 staged (AddFile).
func commitPinnedSeries(t *testing.T, s *store.Store) {
	t.Helper()
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	store.SetClock(s, func() time.Time { clock = clock.Add(time.Minute); return clock })
	m, err := gen.New(gen.ConfigForParams(300_000, 3e-6, 16))
	if err != nil {
		t.Fatal(err)
	}
	for v := uint64(1); v <= 4; v++ {
		if v > 1 {
			m.Step()
		}
		files, err := m.CheckpointFiles()
		if err != nil {
			t.Fatal(err)
		}
		names := make([]string, 0, len(files))
		for name := range files {
			names = append(names, name)
		}
		slices.Sort(names)
		switch v {
		case 2, 3:
			w, err := s.NewVersion(v)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range names {
				if v == 3 || filepath.Ext(name) != ".safetensors" {
					if err := w.AddFile(name, bytes.NewReader(files[name]), int64(len(files[name])), 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				st, err := w.StreamFile(name)
				if err != nil {
					t.Fatal(err)
				}
				for b := files[name]; len(b) > 0; {
					n := min(len(b), 100_000)
					if _, err := st.Write(b[:n]); err != nil {
						t.Fatal(err)
					}
					b = b[n:]
				}
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				if err := w.AddStream(name, st, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := w.Seal(); err != nil {
				t.Fatal(err)
			}
		default:
			dir := t.TempDir()
			for _, name := range names {
				if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Commit(dir, store.CommitOptions{Version: v}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// storedBytesHash is the SHA-256 over every object and manifest under dir
// (testfiles.StoredDigest), logging how many there are.
func storedBytesHash(t *testing.T, dir string) string {
	t.Helper()
	h, n := testfiles.StoredDigest(t, dir)
	t.Logf("%s: %d objects and manifests", dir, n)
	return h
}
