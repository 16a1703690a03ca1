package store

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// setTensorDigests rewrites version v's manifest in root with each tensor's xxh3-128 of its
// bytes in files (as a writer of manifest format 4 records them), except the tensors of
// wrong, given a digest of other bytes; it returns the manifest.
func setTensorDigests(t *testing.T, root string, v uint64, files map[string][]byte, wrong ...string) *manifest {
	t.Helper()
	p := filepath.Join(root, "versions", manifestName(v))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.Files {
		f := &m.Files[i]
		for j := range f.Tensors {
			tn := &f.Tensors[j]
			raw := files[f.Path][f.HeaderLen+tn.Begin : f.HeaderLen+tn.End]
			tn.XXH3 = xxh3Of(raw)
			for _, w := range wrong {
				if w == tn.Name {
					tn.XXH3 = xxh3Of(append([]byte("other"), raw...))
				}
			}
		}
	}
	if b, err = encodeManifest(m); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != manifestTensorDigests {
		t.Fatalf("manifest with digests written as format %d", v)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestReadChecksTensorDigest: where a manifest keeps a tensor's xxh3-128, the read check
// compares the rebuilt bytes with it, not with the SHA-256 of the object id: a tensor whose
// rebuilt bytes are its object's (their SHA-256 is the id) but not its manifest's xxh3 is
// not served (ErrCorrupt naming the file, the tensor and xxh3), every read of it; the others,
// whose digests match, read exactly; and a rebuilt page that differs from the object is not
// served either (the damage the check is for).
func TestReadChecksTensorDigest(t *testing.T) {
	versions, root := committedVersions(t, 3, 84)
	// Version 1 is read through its deltas (the copy holds version 3).
	setTensorDigests(t, root, 1, versions[0], "model.embed_tokens.weight")
	var log logLines
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: -1, Logger: logtest.New(log.logf)})
	expectDamage(r) // its cleanup's Verify finds the wrong digest too (TestVerifyChecksTensorDigests)
	emb, _ := tensorOf(t, r, 1, "model.embed_tokens.weight", versions[0])
	mlp, mlpBytes := tensorOf(t, r, 1, "model.layers.0.mlp.weight", versions[0])
	if emb.XXH3.IsZero() || mlp.XXH3.IsZero() {
		t.Fatal("the reader's manifest lost the digests")
	}
	v := r.mat.view()
	held := v.holds(emb.ID) || v.holds(mlp.ID)
	v.release()
	if held {
		t.Fatal("the copy holds version 1's tensors: the test needs them rebuilt")
	}
	for i := 0; i < 2; i++ {
		_, err := readTensor(r, 1, emb)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("read %d of a tensor whose bytes are not its manifest's xxh3: %v, want ErrCorrupt", i, err)
		}
		for _, part := range []string{"model.safetensors", "model.embed_tokens.weight", "xxh3-128", emb.XXH3.String()} {
			if !strings.Contains(err.Error(), part) {
				t.Fatalf("the error does not name %s: %v", part, err)
			}
		}
	}
	b, err := readTensor(r, 1, mlp)
	if err != nil {
		t.Fatalf("a tensor whose digest matches: %v", err)
	}
	mustEqualBytes(t, "the tensor with a matching digest", b, mlpBytes)
	closeStore(t, r)

	// A fresh reader; a page of mlp rebuilt wrong is refused by its xxh3.
	r = openStore(t, root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: -1, Logger: logtest.New(log.logf)})
	expectDamage(r)
	page := r.objects.bufs.newPage(min(pageSize, int64(len(mlpBytes))))
	copy(page.b, mlpBytes)
	page.b[len(page.b)/2] ^= 0x10
	r.objects.pages.add(pageKey{mlp.ID, 0}, page, page.size())
	if _, err := readTensor(r, 1, mlp); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "xxh3-128") {
		t.Fatalf("a tensor rebuilt wrong, checked by its xxh3: %v, want ErrCorrupt", err)
	}
}

// TestCommitRecordsTensorDigests: the batch path records each tensor's xxh3-128 of its raw
// bytes in the manifest, which is then format 4, for whole, delta and unchanged tensors (the
// streamed path records the same: TestStreamMatchesBatch compares the manifests).
func TestCommitRecordsTensorDigests(t *testing.T) {
	versions, root := committedVersions(t, 3, 85)
	for v := uint64(1); v <= 3; v++ {
		b, err := os.ReadFile(filepath.Join(root, "versions", manifestName(v)))
		if err != nil {
			t.Fatal(err)
		}
		if f := binary.LittleEndian.Uint16(b[4:]); f != manifestTensorDigests {
			t.Fatalf("version %d: manifest format %d, want %d", v, f, manifestTensorDigests)
		}
		m, err := decodeManifest(b)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range m.Files {
			for _, tn := range f.Tensors {
				raw := versions[v-1][f.Path][f.HeaderLen+tn.Begin : f.HeaderLen+tn.End]
				if tn.XXH3 != xxh3Of(raw) {
					t.Fatalf("version %d %s %s: xxh3 %s, want %s", v, f.Path, tn.Name, tn.XXH3, xxh3Of(raw))
				}
				n++
			}
		}
		if n == 0 {
			t.Fatalf("version %d has no tensors", v)
		}
	}
}

// TestVerifyChecksTensorDigests: Verify compares each tensor's bytes with the xxh3-128 its
// manifest records, as reads do, so a digest a writer got wrong is found by verify and not
// first by a reader's EIO; a store whose digests are right verifies clean.
func TestVerifyChecksTensorDigests(t *testing.T) {
	versions, root := committedVersions(t, 3, 85)
	r := openStore(t, root, Options{ReadOnly: true})
	if _, err := r.Verify(nil); err != nil {
		t.Fatalf("verify of a store with right digests: %v", err)
	}
	closeStore(t, r)
	setTensorDigests(t, root, 2, versions[1], "model.embed_tokens.weight")
	r = openStore(t, root, Options{ReadOnly: true})
	expectDamage(r)
	rep, err := r.Verify(nil)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("verify of a tensor whose bytes are not its manifest's xxh3: %v, want ErrCorrupt", err)
	}
	found := false
	for _, d := range rep.Damaged {
		found = found || (d.Version == 2 && strings.Contains(d.Err.Error(), "xxh3") && strings.Contains(d.Err.Error(), "model.embed_tokens.weight"))
	}
	if !found {
		t.Fatalf("report does not name version 2's tensor and its xxh3: %v", rep.Damaged)
	}
}
