package store

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
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
	for _, path := range []string{"fast", "split", "reference"} {
		t.Run(path, func(t *testing.T) {
			s, _ := newStore(t, Options{})
			s.ingest.patchReference = path == "reference"
			if path == "split" {
				s.ingest.patchSplit = 2
			}
			commitTree(t, s, 1, v1)
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
