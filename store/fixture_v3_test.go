package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/store/pack"
)

// store/testdata/v3/ is a store of format version 3 (docs/format.md Part I §2: objects in
// packs, found through pack indexes; manifests of format 3 name their indexes), kept as it
// was written beside the v1 and v2 fixtures: the same four versions (fixtureV1Versions,
// MaxChain 2), every object a record of a pack. Written once by
// go test ./store -run TestFixtureV3 -write-fixtures (only while the directory does not
// exist; a released fixture is never rewritten).
const fixtureV3 = "testdata/v3"

// writeFixtureV3 writes store/testdata/v3 with the current code.
func writeFixtureV3(t *testing.T) { writeFixtureOfFormat(t, fixtureV3, 3) }

// TestFixtureV3 opens the format version 3 store, checks that its objects are records of
// packs (no loose object) holding whole objects, deltas of body versions 1 and 2 and
// version-2 links, that every pack's table is the one an index holds, reads every file of
// every version against the content it was written from, verifies it, and takes a new
// version on top of it.
func TestFixtureV3(t *testing.T) {
	if *writeFixtures {
		writeFixtureV3(t)
	}
	versions := fixtureV1Versions()
	root := copyFixture(t, fixtureV3)
	if b, err := os.ReadFile(filepath.Join(root, formatFileName)); err != nil || !bytes.Equal(b, encodeFormatVersion(3)) {
		t.Fatalf("format file of the v3 fixture: %x, %v", b, err)
	}
	if loose := filesBelow(t, filepath.Join(root, "objects")); len(loose) != 0 {
		t.Fatalf("loose objects in the v3 fixture: %v", loose)
	}
	indexed := map[ID]bool{}
	for _, name := range filesBelow(t, filepath.Join(root, indexDir)) {
		b, err := os.ReadFile(filepath.Join(root, indexDir, name))
		if err != nil {
			t.Fatal(err)
		}
		x, err := pack.DecodeIndex(b)
		if err != nil {
			t.Fatalf("index %s: %v", name, err)
		}
		for _, p := range x.Packs {
			indexed[p.ID] = true
		}
	}
	kinds := map[string]int{}
	packs := filesBelow(t, filepath.Join(root, packDir))
	for _, p := range packs {
		b, err := os.ReadFile(filepath.Join(root, packDir, p))
		if err != nil {
			t.Fatal(err)
		}
		entries, id, err := pack.ReadTrailer(bytes.NewReader(b), int64(len(b)))
		if err != nil || !indexed[id] || filepath.Base(p) != ID(id).String() {
			t.Fatalf("pack %s: %v (id %x, named by an index: %v)", p, err, id[:4], indexed[id])
		}
		for _, e := range entries {
			rec := b[e.Offset : e.Offset+e.Length]
			h, err := parseObjectHeader(rec, e.Length)
			switch {
			case err != nil:
				t.Fatalf("record %x of pack %s: %v", e.ID[:4], p, err)
			case h.ID != ID(e.ID):
				t.Fatalf("record %x of pack %s names object %s", e.ID[:4], p, h.ID)
			case h.HasDelta():
				kind := "delta"
				if h.Kind == kindFull {
					kind = "link"
				}
				kinds[fmt.Sprintf("%s v%d", kind, rec[h.DeltaOffset()+4])]++
			default:
				kinds["whole"]++
			}
		}
	}
	if len(packs) == 0 || kinds["delta v1"] == 0 || kinds["delta v2"] == 0 || kinds["link v2"] == 0 || kinds["whole"] == 0 {
		t.Fatalf("records of the v3 fixture's %d packs: %v, want whole objects, deltas of versions 1 and 2, version-2 links", len(packs), kinds)
	}
	checkFixtureStore(t, "v3", root, versions, Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
}
