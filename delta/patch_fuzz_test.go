package delta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzOpenPatch feeds arbitrary patch files to the reader and to ApplyPatch on a fixed base:
// no panic, only ErrMalformed/ErrUnsupportedVersion from the reader, and an apply either
// fails leaving the target untouched or yields exactly the result hash the patch records.
func FuzzOpenPatch(f *testing.F) {
	base, result, order := threeFileVersions(f)
	raw, p := buildTestPatch(f, 43, 42, base, result, order)
	f.Add(raw)
	if g, err := RewriteGaps(p); err == nil { // the leb128_gaps encoding, and one stream cut short
		f.Add(g)
		f.Add(g[:len(g)-1])
	}
	idx := p.entries["model.wide.indices"]
	for _, edit := range []func(b []byte){
		func(b []byte) { b[p.Header.DataStart()+idx.Begin] = 3 },
		func(b []byte) { binary.LittleEndian.PutUint32(b[p.Header.DataStart()+idx.Begin:], 0xFFFFFFFF) },
		func(b []byte) { b[len(b)-1] ^= 0xFF },
		func(b []byte) { copy(b[8:], `{"__metadata__":{"format":"x"}}`) },
	} {
		b := bytes.Clone(raw)
		edit(b)
		f.Add(b)
	}
	f.Add([]byte{})
	model := base["model.safetensors"]
	f.Fuzz(func(t *testing.T, patch []byte) {
		p, err := OpenPatch(bytes.NewReader(patch), int64(len(patch)))
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("OpenPatch error %v wraps no sentinel", err)
			}
			return
		}
		if err := p.Verify(); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("Verify error %v is not ErrMalformed", err)
		}
		for _, file := range p.Plan.Files {
			// Both hashes, both scans: whatever is checked is what the result must hash to.
			for _, cfg := range []applyConfig{{chunk: 512}, {chunk: 512, sequential: true, opts: ApplyOptions{VerifySHA256: true}}} {
				target := &memTarget{b: bytes.Clone(model)}
				res, err := applyPatch(p, target, int64(len(model)), file.Name, &memJournal{}, cfg)
				kind, kindErr := chooseDigest(file, cfg.opts)
				if kindErr != nil && err == nil {
					t.Fatalf("apply of %s succeeded without a digest to check (%v)", file.Name, kindErr)
				}
				_, want := kind.want(file)
				switch {
				case err != nil && !bytes.Equal(target.b, model):
					t.Fatalf("failed apply of %s (%v) changed the target", file.Name, err)
				case err == nil && oneShot(kind, target.b) != want:
					t.Fatalf("apply of %s succeeded with a %s other than the recorded result", file.Name, res.Hash)
				}
			}
		}
	})
}

// FuzzJournalRecord checks that any journal content is refused or matched, never a panic,
// and never lets an apply write to a target that is not a known state.
func FuzzJournalRecord(f *testing.F) {
	base, result, order := threeFileVersions(f)
	_, p := buildTestPatch(f, 43, 42, base, result, order)
	f.Add([]byte(`{"format":"weightfs-apply-journal","version":1}`))
	f.Add([]byte(`not json`))
	model := base["model.safetensors"]
	f.Fuzz(func(t *testing.T, rec []byte) {
		target := &memTarget{b: bytes.Clone(model)}
		_, err := ApplyPatchWith(p, target, int64(len(model)), "model.safetensors", &memJournal{rec: rec, ok: true}, ApplyOptions{})
		if err == nil && !bytes.Equal(target.b, result["model.safetensors"]) {
			t.Fatal("apply with a fuzzed journal succeeded with wrong bytes")
		}
	})
}
