package store_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
// move showed that the move changed no byte of any object or manifest, on either backend. It
// changed once since, when version-2 delta sections came (docs/format.md Part I §3.3):
// TestStoredBytesOnlySectionsV2 shows that the change is those sections alone (and the
// manifests' new_object_bytes). It changed again when manifests came to keep each tensor's
// xxh3-128 (manifest format 4, docs/format.md Part I §4): the objects are the same, the
// manifests carry the digests (TestCommitRecordsTensorDigests). A change of it is a change
// of the stored format: docs/format.md first.
const storedBytesSHA256 = "fe2228aef4fd983b5bcf18fde2ff72de934d457f879e56475801e8c536b1ad53"

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
		// The pinned bytes are those of loose objects (store format 2's layout).
		s, err := location.Open(c.path, location.Options{Options: store.LooseObjects(store.Options{CacheDir: t.TempDir(), Logger: logtest.New(t.Logf)})})
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

// TestStoredBytesOnlySectionsV2 commits the pinned series into a store that writes version-2
// delta sections and one that writes version 1 only: the manifests are the same bytes, the same
// objects are stored, and an object differs only in its delta section (and so its size and
// CRC), version 2 in the one store where it is version 1 in the other. So the change of
// storedBytesSHA256 that version 2 made is exactly its delta sections.
func TestStoredBytesOnlySectionsV2(t *testing.T) {
	var dirs [2]string
	for i, chain := range []int{-1, 0} {
		dirs[i] = filepath.Join(t.TempDir(), "store")
		if err := store.Init(dirs[i]); err != nil {
			t.Fatal(err)
		}
		s, err := store.Open(dirs[i], store.LooseObjects(store.Options{CacheDir: t.TempDir(), Logger: logtest.New(t.Logf)}))
		if err != nil {
			t.Fatal(err)
		}
		if chain >= 0 {
			store.SetContextChain(s, chain)
		}
		commitPinnedSeries(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	files := func(dir string) map[string][]byte {
		out := map[string][]byte{}
		for _, top := range []string{"objects", "versions"} {
			err := filepath.WalkDir(filepath.Join(dir, top), func(p string, d os.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return err
				}
				rel, _ := filepath.Rel(dir, p)
				out[filepath.ToSlash(rel)], err = os.ReadFile(p)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	v2, v1 := files(dirs[0]), files(dirs[1])
	if len(v2) != len(v1) {
		t.Fatalf("%d objects and manifests with version 2, %d without", len(v2), len(v1))
	}
	le := func(b []byte) int { return int(binary.LittleEndian.Uint64(b)) }
	differ := 0
	for name, a := range v2 {
		b, ok := v1[name]
		switch {
		case !ok:
			t.Errorf("%s: stored only with version 2", name)
			continue
		case bytes.Equal(a, b):
			continue
		case strings.HasPrefix(name, "versions/"):
			// The manifest (docs/format.md Part I §4): only its summary's new_object_bytes
			// (fewer), and so its length and CRC, may differ.
			newBytes := regexp.MustCompile(`"new_object_bytes":([0-9]+)`)
			ma, mb := newBytes.FindSubmatch(a), newBytes.FindSubmatch(b)
			if ma == nil || mb == nil || !bytes.Equal(newBytes.ReplaceAll(a[16:len(a)-4], nil), newBytes.ReplaceAll(b[16:len(b)-4], nil)) {
				t.Errorf("%s: the manifests differ in more than new_object_bytes", name)
			} else if na, nb := string(ma[1]), string(mb[1]); len(na) > len(nb) || len(na) == len(nb) && na >= nb {
				t.Errorf("%s: new_object_bytes %s with version 2, %s without: want fewer", name, na, nb)
			}
			continue
		}
		differ++
		// The object header (docs/format.md Part I §3.1): all but the delta section's
		// length equal, the full sections equal, the delta sections of versions 2 and 1.
		fa, fb, da, db := le(a[80:]), le(b[80:]), le(a[88:]), le(b[88:])
		if !bytes.Equal(a[:88], b[:88]) || !bytes.Equal(a[96:96+fa], b[96:96+fb]) {
			t.Errorf("%s: differs outside its delta section", name)
			continue
		}
		if sa, sb := a[96+fa:96+fa+da], b[96+fb:96+fb+db]; string(sa[:4]) != "WFSD" || sa[4] != 2 || sb[4] != 1 {
			t.Errorf("%s: delta sections of versions %d and %d, want 2 and 1", name, sa[4], sb[4])
		}
	}
	t.Logf("%d of %d objects differ, each in its delta section alone", differ, len(v2))
	if differ == 0 {
		t.Error("no object has a version-2 delta section")
	}
}
