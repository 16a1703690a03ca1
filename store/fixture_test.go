package store

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// Stores of every released store format, kept as they were written (gocryptfs keeps its
// example filesystems the same way), so that a later change of the code cannot silently stop
// reading an old store. store/testdata/v1/ is a store of format version 1 (docs/format.md
// §2: the format file says 1; objects and manifests are those of §3 and §4), written by
// fixtureV1Versions below; the v1-* directories beside it are copies of it with one thing
// damaged each (fixtureV1Damage). Tests copy a fixture to a temporary directory before they
// open it, and create the directories git does not keep (empty tmp/ and cache/).
//
// To write them again (only ever for a new format version, into a new directory; a released
// one is never rewritten): go test ./store -run TestFixtureV1 -write-fixtures
var writeFixtures = flag.Bool("write-fixtures", false, "write store/testdata/v1 and its damaged copies from the current code")

const fixtureV1 = "testdata/v1"

// fixtureV1Versions is the content of the v1 fixture: four versions of a small model whose
// tensors change a little at each step (deltas, and with MaxChain 2 an anchor with a link),
// with a file that is not safetensors (stored whole), a file in a subdirectory, an empty
// directory, and a file that appears in version 3. It depends on nothing but math/rand/v2's
// PCG, whose output Go keeps stable, and hand-written safetensors headers.
func fixtureV1Versions() []map[string][]byte {
	rng := rand.New(rand.NewPCG(2026, 1))
	const embN, projN = 1536, 512
	emb, proj := make([]byte, 2*embN), make([]byte, 2*projN)
	for _, b := range [][]byte{emb, proj} {
		for i := 0; i < len(b); i += 2 {
			b[i] = byte(rng.Uint32())
			b[i+1] = 0x3c + byte(rng.IntN(3)) | byte(rng.IntN(2))<<7
		}
	}
	header := fmt.Sprintf(`{"emb":{"dtype":"BF16","shape":[%d],"data_offsets":[0,%d]},"proj":{"dtype":"BF16","shape":[%d],"data_offsets":[%d,%d]}}`,
		embN, 2*embN, projN, 2*embN, 2*embN+2*projN)
	var versions []map[string][]byte
	for v := 1; v <= 4; v++ {
		if v > 1 { // about 2% of elements one step of the low byte
			for _, b := range [][]byte{emb, proj} {
				for i := 0; i < len(b); i += 2 {
					if rng.IntN(50) == 0 {
						b[i]++
					}
				}
			}
		}
		files := map[string][]byte{
			"model.safetensors":   rawSafetensors(header, slices.Concat(emb, proj)),
			"config.json":         []byte(fmt.Sprintf("{\"step\": %d}\n", 100*v)),
			"tokenizer/vocab.txt": []byte("a\nb\nc\n"),
			"empty/":              nil,
		}
		if v >= 3 {
			files["notes.txt"] = []byte("added in version 3\n")
		}
		versions = append(versions, files)
	}
	return versions
}

// fixtureV1Damage is the damaged copies of the v1 fixture: what is damaged, and what Verify
// must name.
var fixtureV1Damage = []struct {
	dir    string
	damage func(t *testing.T, root string, s *Store) // s: the fixture store, open read-only
	names  string                                    // a word Verify's error must hold
	// unreadable is the version and file whose read must fail with ErrCorrupt.
	unreadable struct {
		v    uint64
		path string
	}
}{
	{"v1-flipped-delta", func(t *testing.T, root string, s *Store) {
		flipByte(t, fixtureObjectPath(t, root, fixtureTensorObject(t, s, 3, kindDelta)))
	}, "object", struct {
		v    uint64
		path string
	}{3, "model.safetensors"}},
	{"v1-flipped-manifest", func(t *testing.T, root string, s *Store) {
		flipByte(t, filepath.Join(root, "versions", "v000002"))
	}, "version 2", struct {
		v    uint64
		path string
	}{2, "config.json"}},
	{"v1-missing-object", func(t *testing.T, root string, s *Store) {
		ver, err := s.versions.sealedVersion(4)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(fixtureObjectPath(t, root, ver.files["config.json"].ID)); err != nil {
			t.Fatal(err)
		}
	}, "version 4", struct {
		v    uint64
		path string
	}{4, "config.json"}},
}

// fixtureTensorObject returns the object of tensor emb of model.safetensors in version v,
// which must be of kind k.
func fixtureTensorObject(t *testing.T, s *Store, v uint64, k objectKind) ID {
	t.Helper()
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range ver.files["model.safetensors"].Tensors {
		if tn.Name != "emb" {
			continue
		}
		m, err := s.objects.meta(tn.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m.Kind != k {
			t.Fatalf("tensor emb of version %d is of kind %d, want %d", v, m.Kind, k)
		}
		return tn.ID
	}
	t.Fatalf("version %d has no tensor emb", v)
	return ID{}
}

func fixtureObjectPath(t *testing.T, root string, id ID) string {
	t.Helper()
	return filepath.Join(root, "objects", id.String()[:2], id.String())
}

// copyFixture copies the fixture dir to a temporary store and returns its root.
func copyFixture(t *testing.T, dir string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(root, os.DirFS(dir)); err != nil {
		t.Fatalf("copy %s: %v", dir, err)
	}
	for _, d := range []string{"objects", "versions", "tmp", "cache"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestFixtureV1 opens the format version 1 store, reads every file of every version and
// compares it with the content it was written from, verifies it, and takes a new version on
// top of it.
func TestFixtureV1(t *testing.T) {
	if *writeFixtures {
		writeFixtureV1(t)
	}
	versions := fixtureV1Versions()
	root := copyFixture(t, fixtureV1)
	// The fixture holds every kind of object a version 1 store has.
	kinds := map[string]int{}
	err := filepath.WalkDir(filepath.Join(root, "objects"), func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h, err := parseObjectHeader(b, int64(len(b)))
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", p, err)
		case h.Kind == kindDelta:
			kinds["delta"]++
		case h.DeltaLen > 0:
			kinds["anchor with link"]++
		default:
			kinds["whole"]++
		}
		return nil
	})
	if err != nil || kinds["delta"] == 0 || kinds["anchor with link"] == 0 || kinds["whole"] == 0 {
		t.Fatalf("objects of the v1 fixture: %v %v, want deltas, anchors with links and whole objects", kinds, err)
	}
	checkFixtureStore(t, "v1", root, versions, Options{ReadOnly: true, CacheDir: t.TempDir()})
}

// writeFixtureTree writes files (a name ending in / is an empty directory) into a new
// directory.
func writeFixtureTree(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for p, b := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// checkFixtureContent reads every file of every version through OpenFile and Export.
func checkFixtureContent(t *testing.T, s *Store, versions []map[string][]byte) {
	t.Helper()
	for i, files := range versions {
		v := uint64(i + 1)
		for p, want := range files {
			if strings.HasSuffix(p, "/") {
				continue
			}
			mustEqualBytes(t, fmt.Sprintf("v%d %s", v, p), readWhole(t, s, v, p), want)
		}
		out := filepath.Join(t.TempDir(), "export")
		if err := s.Export(v, out, nil); err != nil {
			t.Fatalf("export v%d: %v", v, err)
		}
		if st, err := os.Stat(filepath.Join(out, "empty")); err != nil || !st.IsDir() {
			t.Errorf("export v%d: the empty directory is missing: %v", v, err)
		}
	}
}

// TestFixtureV1Damaged opens each damaged copy of the v1 store: Verify finds the damage and
// names it, the damaged file's read fails with ErrCorrupt, and every other version reads.
func TestFixtureV1Damaged(t *testing.T) {
	versions := fixtureV1Versions()
	for _, d := range fixtureV1Damage {
		t.Run(d.dir, func(t *testing.T) {
			root := copyFixture(t, filepath.Join("testdata", d.dir))
			s := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), Logger: logtest.New(func(string, ...any) {})})
			expectDamage(s)
			rep, err := s.Verify(nil)
			if !errors.Is(err, ErrCorrupt) || len(rep.Damaged) == 0 || !strings.Contains(err.Error(), d.names) {
				t.Fatalf("verify of %s: %v (damage %v), want ErrCorrupt naming %q", d.dir, err, rep.Damaged, d.names)
			}
			u := d.unreadable
			f, err := s.OpenFile(u.v, u.path)
			if err == nil {
				_, err = f.ReadAt(make([]byte, f.Size()), 0)
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("read of version %d %s: %v, want ErrCorrupt", u.v, u.path, err)
			}
			for i, files := range versions {
				v := uint64(i + 1)
				if v == u.v {
					continue
				}
				for p, want := range files {
					if strings.HasSuffix(p, "/") || (d.dir == "v1-flipped-delta" && v > u.v && p == "model.safetensors") {
						continue // a later version's delta chain may pass through the damage
					}
					mustEqualBytes(t, fmt.Sprintf("v%d %s", v, p), readWhole(t, s, v, p), want)
				}
			}
		})
	}
}

// writeFixtureV1 writes store/testdata/v1 and its damaged copies with the current code.
func writeFixtureV1(t *testing.T) {
	if _, err := os.Stat(fixtureV1); err == nil {
		t.Fatalf("%s exists: a released format's fixture is never rewritten (remove it by hand only if it was never committed)", fixtureV1)
	}
	if storeFormatVersion != 1 {
		t.Fatalf("this program writes store format %d: write a fixture of that version beside v1, never over it", storeFormatVersion)
	}
	tmp := commitFixtureVersions(t)
	write := func(dst string, damage func(root string)) {
		work := filepath.Join(t.TempDir(), "store")
		if err := os.CopyFS(work, os.DirFS(tmp)); err != nil {
			t.Fatal(err)
		}
		if damage != nil {
			damage(work)
		}
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
		// The store's files only: not the node-local caches, nor empty directories.
		err := filepath.WalkDir(work, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(work, p)
			if e.IsDir() {
				if rel == "cache" || rel == "tmp" || rel == "pins" {
					return filepath.SkipDir
				}
				return nil
			}
			if rel == "lock" { // the writer's lock file, made by Open
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	write(fixtureV1, nil)
	for _, d := range fixtureV1Damage {
		write(filepath.Join("testdata", d.dir), func(root string) {
			r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), Logger: logtest.New(func(string, ...any) {})})
			d.damage(t, root, r)
			expectDamage(r)
			closeStore(t, r)
		})
	}
}

// checkFixtureStore opens the fixture store at root as a reader (readerOpts) and as a writer:
// both list versions 1-4, read them byte for byte and verify clean, and the writer commits a
// version 5 on top that reads back.
func checkFixtureStore(t *testing.T, name, root string, versions []map[string][]byte, readerOpts Options) {
	t.Helper()
	for _, opts := range []Options{readerOpts, {}} {
		s := openStore(t, root, opts)
		if got := versionNumbers(s.Versions()); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
			t.Fatalf("versions %v, want 1-4", got)
		}
		checkFixtureContent(t, s, versions)
		rep, err := s.Verify(nil)
		if err != nil || len(rep.Damaged) != 0 || rep.Versions != 4 {
			t.Fatalf("verify of the %s fixture: %v (%d versions, damage %v)", name, err, rep.Versions, rep.Damaged)
		}
		if !opts.ReadOnly {
			next := maps.Clone(versions[3])
			next["config.json"] = []byte("{\"step\": 500}\n")
			if _, err := s.Commit(writeFixtureTree(t, next), CommitOptions{Version: 5}); err != nil {
				t.Fatalf("commit on top of the %s fixture: %v", name, err)
			}
			mustEqualBytes(t, "v5 config.json", readWhole(t, s, 5, "config.json"), next["config.json"])
			mustEqualBytes(t, "v5 model", readWhole(t, s, 5, "model.safetensors"), next["model.safetensors"])
			// The writer upgraded the copy to format 3 and put the new version in packs.
			if b, err := os.ReadFile(filepath.Join(root, formatFileName)); err != nil || !bytes.Equal(b, encodeFormatVersion(storeFormatVersion)) {
				t.Fatalf("format file of the %s fixture after a writer's open: % x, %v", name, b, err)
			}
			if len(filesBelow(t, filepath.Join(root, packDir))) == 0 || len(filesBelow(t, filepath.Join(root, indexDir))) == 0 {
				t.Fatalf("version 5 of the %s fixture is in no pack", name)
			}
		}
		closeStore(t, s)
	}
}

// commitFixtureVersions commits the fixtures' four versions (fixtureV1Versions, MaxChain 2)
// into a fresh store with the current code and returns its root.
func commitFixtureVersions(t *testing.T) string {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "store")
	if err := Init(tmp); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, tmp, Options{MaxChain: 2, Logger: logtest.New(func(string, ...any) {})})
	for i, files := range fixtureV1Versions() {
		if _, err := s.Commit(writeFixtureTree(t, files), CommitOptions{Version: uint64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	closeStore(t, s)
	return tmp
}
