package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// forgeDigest returns patch with the hex digest d (which must occur exactly once) changed in
// its first digit: the header keeps its length, every other claim its value.
func forgeDigest(t testing.TB, patch []byte, d []byte) []byte {
	t.Helper()
	h := []byte(hex.EncodeToString(d))
	if n := bytes.Count(patch, h); n != 1 {
		t.Fatalf("digest %s occurs %d times in the patch", h, n)
	}
	forged := bytes.Clone(h)
	forged[0] = "1032547698badcfe"[strings.IndexByte("0123456789abcdef", forged[0])]
	return bytes.Replace(patch, h, forged, 1)
}

// TestCommitPatchXXH3Claims: a patch whose SHA-256 digests are right but whose xxh3-128
// claims are not (a file's result_xxh3 or base_xxh3, a tensor's "xxh3" in params:PATH, of a
// file patched by tensor, one whose header changes in place, or one carried whole) is
// refused like any other bad claim, on the fast path (one pass and split) and the reference
// path, and leaves the store as it was; the good patch then seals on each.
func TestCommitPatchXXH3Claims(t *testing.T) {
	v1, v2 := patchVersions(t)
	_, good := renderedPatch(t, v1, v2)
	p, err := delta.OpenPatch(bytes.NewReader(good), int64(len(good)))
	if err != nil {
		t.Fatal(err)
	}
	file := func(name string) delta.PatchFile {
		f, ok := p.File(name)
		if !ok || !f.HasXXH3 {
			t.Fatalf("the test's patch has no xxh3 of %s", name)
		}
		return f
	}
	tensorXXH3 := func(name string) []byte {
		for _, x := range p.Plan.Tensors {
			if x.Name == name {
				return x.ResultXXH3[:]
			}
		}
		t.Fatalf("no tensor %s in the patch", name)
		return nil
	}
	model, meta, config := file("model.safetensors"), file("meta.safetensors"), file("config.json")
	cases := []struct {
		name  string
		patch []byte
		says  string
	}{
		{"result_xxh3 of a file patched by tensor", forgeDigest(t, good, model.ResultXXH3[:]), "result_xxh3"},
		{"base_xxh3 of a file patched by tensor", forgeDigest(t, good, model.BaseXXH3[:]), "base_xxh3"},
		{"a changed tensor's xxh3", forgeDigest(t, good, tensorXXH3("a")), `tensor "a"`},
		{"an anchor's xxh3", forgeDigest(t, good, tensorXXH3("c")), `tensor "c"`},
		{"result_xxh3 of a file with a new header", forgeDigest(t, good, meta.ResultXXH3[:]), "result_xxh3"},
		{"base_xxh3 of a file with a new header", forgeDigest(t, good, meta.BaseXXH3[:]), "base_xxh3"},
		{"result_xxh3 of a file carried whole", forgeDigest(t, good, config.ResultXXH3[:]), "result_xxh3"},
		{"base_xxh3 of a file carried whole", forgeDigest(t, good, config.BaseXXH3[:]), "base_xxh3"},
	}
	for _, path := range patchPaths {
		t.Run(path, func(t *testing.T) {
			s := storeOnPatchPath(t, path, v1)
			for _, c := range cases {
				_, err := s.CommitPatch(bytes.NewReader(c.patch), int64(len(c.patch)), 2)
				if !errors.Is(err, ErrBadPatch) || !strings.Contains(err.Error(), c.says) {
					t.Fatalf("%s: got %v, want ErrBadPatch saying %q", c.name, err, c.says)
				}
				if latest, _ := s.Latest(); latest != 1 || len(s.Versions()) != 1 {
					t.Fatalf("%s: versions %v after a refusal", c.name, s.Versions())
				}
			}
			if _, err := s.CommitPatch(bytes.NewReader(good), int64(len(good)), 2); err != nil {
				t.Fatalf("the good patch after the refusals: %v", err)
			}
			for name, content := range v2 {
				mustEqualBytes(t, fmt.Sprintf("%s (%s path)", name, path), readWhole(t, s, 2, name), content)
			}
		})
	}
}

// xxh3OnlyPatch is patch (a raw one, as a store renders it) as a trainer may write it into a
// mount: every file's SHA-256 keys left out, its xxh3-128 ones kept (docs/format.md Part III
// §2).
func xxh3OnlyPatch(t testing.TB, patch []byte) []byte {
	t.Helper()
	p, err := delta.OpenPatch(bytes.NewReader(patch), int64(len(patch)))
	if err != nil {
		t.Fatal(err)
	}
	plan := p.Plan
	if hdr, _, err := delta.EncodePatchHeader(plan); err != nil || !bytes.Equal(hdr, patch[:p.Header.DataStart()]) {
		t.Fatalf("the patch's plan does not encode to its header (%v)", err)
	}
	plan.Files = slices.Clone(plan.Files)
	for i := range plan.Files {
		f := &plan.Files[i]
		f.XXH3Only, f.BaseSHA256, f.ResultSHA256 = true, [32]byte{}, [32]byte{}
	}
	hdr, _, err := delta.EncodePatchHeader(plan)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(hdr, []byte("sha256")) {
		t.Fatalf("the xxh3-only patch's header names a SHA-256: %s", hdr)
	}
	return append(hdr, patch[p.Header.DataStart():]...)
}

// TestCommitPatchXXH3Only: a patch that records its files' xxh3-128 and no SHA-256 (what a
// trainer may write in) seals the version a full ingest seals, on every path, the store
// computing each file's SHA-256 itself; its base and result claims are checked all the same.
func TestCommitPatchXXH3Only(t *testing.T) {
	v1, v2 := patchVersions(t)
	full, good := renderedPatch(t, v1, v2)
	only := xxh3OnlyPatch(t, good)
	p, err := delta.OpenPatch(bytes.NewReader(only), int64(len(only)))
	if err != nil {
		t.Fatal(err)
	}
	model, _ := p.File("model.safetensors")
	config, _ := p.File("config.json")
	if !model.XXH3Only || model.New() {
		t.Fatalf("model.safetensors in the xxh3-only patch: %+v", model)
	}
	bad := []struct {
		name  string
		patch []byte
		says  string
	}{
		{"base_xxh3", forgeDigest(t, only, model.BaseXXH3[:]), "base_xxh3"},
		{"result_xxh3", forgeDigest(t, only, model.ResultXXH3[:]), "result_xxh3"},
		{"base_xxh3 of a file carried whole", forgeDigest(t, only, config.BaseXXH3[:]), "base_xxh3"},
		{"result_xxh3 of a file carried whole", forgeDigest(t, only, config.ResultXXH3[:]), "result_xxh3"},
	}
	for _, path := range patchPaths {
		t.Run(path, func(t *testing.T) {
			s := storeOnPatchPath(t, path, v1)
			for _, c := range bad {
				if _, err := s.CommitPatch(bytes.NewReader(c.patch), int64(len(c.patch)), 2); !errors.Is(err, ErrBadPatch) || !strings.Contains(err.Error(), c.says) {
					t.Fatalf("%s: got %v, want ErrBadPatch saying %q", c.name, err, c.says)
				}
			}
			if _, err := s.CommitPatch(bytes.NewReader(only), int64(len(only)), 2); err != nil {
				t.Fatal(err)
			}
			if mf, mi := manifestOf(t, s, 2), manifestOf(t, full, 2); !reflect.DeepEqual(mf.Files, mi.Files) {
				t.Fatalf("the xxh3-only patch's manifest differs from a full ingest's:\n%+v\n%+v", mf.Files, mi.Files)
			}
			for name, content := range v2 {
				mustEqualBytes(t, name, readWhole(t, s, 2, name), content)
			}
			var again bytes.Buffer // what the store serves for the version records both digests
			if _, err := s.WritePatch(2, &writerAtBuffer{&again}); err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, "the version's patch", again.Bytes(), good)
		})
	}
}

// patchPaths are CommitPatch's three ways through a file: the fast path, the fast path split
// over goroutines, and the reference path.
var patchPaths = []string{"fast", "split", "reference"}

// storeOnPatchPath is a new store whose CommitPatch takes path (one of patchPaths), holding
// version 1 = files.
func storeOnPatchPath(t *testing.T, path string, files map[string][]byte) *Store {
	t.Helper()
	s, _ := newStore(t, Options{})
	s.ingest.patchReference = path == "reference"
	if path == "split" {
		s.ingest.patchSplit = 2
	}
	commitTree(t, s, 1, files)
	return s
}

// TestCommitPatchKnownBaseXXH3: a patch's base_xxh3 is checked against the digest the last
// patch's pass found for the same file (renders.knownFileXXH3; the fast paths then do not
// hash the base file again): a wrong one is still refused, of a file patched by tensor and of
// one carried whole, on every path, and the good patch seals.
func TestCommitPatchKnownBaseXXH3(t *testing.T) {
	versions := randomPatchModels(t, rand.New(rand.NewPCG(5, 6)), 3)
	full, _ := newStore(t, Options{})
	commitAll(t, full, versions)
	patchOf := func(v uint64) []byte {
		var b bytes.Buffer
		if _, err := full.WritePatch(v, &writerAtBuffer{&b}); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	p2, p3 := patchOf(2), patchOf(3)
	p, err := delta.OpenPatch(bytes.NewReader(p3), int64(len(p3)))
	if err != nil {
		t.Fatal(err)
	}
	var cases [][2]string // file, what the refusal says
	for _, f := range p.Plan.Files {
		if f.HasXXH3 && !f.New() && (f.Name == "config.json" || f.Name == "model-00001-of-00002.safetensors") {
			cases = append(cases, [2]string{f.Name, "base_xxh3"})
		}
	}
	if len(cases) != 2 {
		t.Fatalf("the patch of version 3 has %d of the two files the test forges", len(cases))
	}
	for _, path := range patchPaths {
		t.Run(path, func(t *testing.T) {
			s := storeOnPatchPath(t, path, versions[0])
			if _, err := s.CommitPatch(bytes.NewReader(p2), int64(len(p2)), 2); err != nil {
				t.Fatal(err)
			}
			for _, c := range cases {
				m := manifestOf(t, s, 2)
				var sum ID
				for _, f := range m.Files {
					if f.Path == c[0] {
						sum = f.SHA256
					}
				}
				if _, ok := s.renders.knownFileXXH3(sum); !ok {
					t.Fatalf("version 2's %s: its xxh3-128 is not known after its patch sealed", c[0])
				}
				f, _ := p.File(c[0])
				forged := forgeDigest(t, p3, f.BaseXXH3[:])
				_, err := s.CommitPatch(bytes.NewReader(forged), int64(len(forged)), 3)
				if !errors.Is(err, ErrBadPatch) || !strings.Contains(err.Error(), c[1]) || !strings.Contains(err.Error(), c[0]) {
					t.Fatalf("a wrong base_xxh3 of %s: got %v, want ErrBadPatch naming it", c[0], err)
				}
				if latest, _ := s.Latest(); latest != 2 {
					t.Fatalf("latest %d after a refusal", latest)
				}
			}
			if _, err := s.CommitPatch(bytes.NewReader(p3), int64(len(p3)), 3); err != nil {
				t.Fatalf("the good patch after the refusals: %v", err)
			}
			if mf, mi := manifestOf(t, s, 3), manifestOf(t, full, 3); !reflect.DeepEqual(mf.Files, mi.Files) {
				t.Fatal("version 3's manifest is not a full ingest's")
			}
		})
	}
}
