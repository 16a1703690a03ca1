package store

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// store/testdata/v2/ is a store of format version 2 (docs/format.md Part I §2: objects may
// hold delta sections of body version 2), kept as it was written beside the v1 fixture: the
// same four versions (fixtureV1Versions, MaxChain 2), so that it holds a version-1 delta (the
// first after a whole copy), a version-2 delta and an anchor whose link is version 2. Written
// once by go test ./store -run TestFixtureV2 -write-fixtures (only while the directory does
// not exist; a released fixture is never rewritten).
const fixtureV2 = "testdata/v2"

// writeFixtureV2 writes store/testdata/v2 with the current code.
func writeFixtureV2(t *testing.T) { writeFixtureOfFormat(t, fixtureV2, 2) }

// writeFixtureOfFormat writes dir, a fixture of store format version format, with the current
// code: the fixtures' four versions, the store's own files only (format file, objects, packs,
// indexes, manifests, the gc record). A released fixture is never rewritten: nothing happens
// when dir exists.
func writeFixtureOfFormat(t *testing.T, dir string, format uint32) {
	if _, err := os.Stat(dir); err == nil {
		return // released: never rewritten
	}
	if storeFormatVersion != format {
		t.Fatalf("this program writes store format %d: write a fixture of that version beside %s, never over it", storeFormatVersion, dir)
	}
	tmp := commitFixtureVersions(t)
	err := filepath.WalkDir(tmp, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tmp, p)
		if e.IsDir() {
			if rel == "cache" || rel == "tmp" || rel == "pins" {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "lock" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFixtureV2 opens the format version 2 store, checks that it holds version-2 delta
// sections (a delta object's and an anchor's link), reads every file of every version and
// compares it with the content it was written from, verifies it, and takes a new version on
// top of it.
func TestFixtureV2(t *testing.T) {
	if *writeFixtures {
		writeFixtureV2(t)
	}
	versions := fixtureV1Versions()
	root := copyFixture(t, fixtureV2)
	if b, err := os.ReadFile(filepath.Join(root, formatFileName)); err != nil || !bytes.Equal(b, encodeFormatVersion(2)) {
		t.Fatalf("format file of the v2 fixture: %x, %v", b, err)
	}
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
		case h.HasDelta():
			kind := "delta"
			if h.Kind == kindFull {
				kind = "link"
			}
			kinds[fmt.Sprintf("%s v%d", kind, b[h.DeltaOffset()+4])]++
		default:
			kinds["whole"]++
		}
		return nil
	})
	if err != nil || kinds["delta v1"] == 0 || kinds["delta v2"] == 0 || kinds["link v2"] == 0 || kinds["whole"] == 0 {
		t.Fatalf("objects of the v2 fixture: %v %v, want whole objects, deltas of versions 1 and 2, version-2 links", kinds, err)
	}
	checkFixtureStore(t, "v2", root, versions, Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
}
