package store

import (
	"crypto/sha256"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// Tests of the per-tensor checks of OpenFile's reads (read_check.go) and of the damage they
// guard against (docs/design.md, "What the checks guard against").

// tensorOf returns tensor name of model.safetensors of version v and its bytes in files.
func tensorOf(t *testing.T, s *Store, v uint64, name string, files map[string][]byte) (manifestTensor, []byte) {
	t.Helper()
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	f := ver.files["model.safetensors"]
	for _, tn := range f.Tensors {
		if tn.Name == name {
			return tn, files["model.safetensors"][f.HeaderLen+tn.Begin : f.HeaderLen+tn.End]
		}
	}
	t.Fatalf("version %d has no tensor %s", v, name)
	return manifestTensor{}, nil
}

// readTensor reads tensor tn of model.safetensors of version v through OpenFile.
func readTensor(s *Store, v uint64, tn manifestTensor) ([]byte, error) {
	f, err := s.OpenFile(v, "model.safetensors")
	if err != nil {
		return nil, err
	}
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		return nil, err
	}
	hl := ver.files["model.safetensors"].HeaderLen
	b := make([]byte, tn.End-tn.Begin)
	n, err := f.ReadAt(b, hl+tn.Begin)
	return b[:n], err
}

// checkedObjects lists the objects a store's reads have checked.
func checkedObjects(s *Store) map[ID]bool {
	chk := s.mat.contentChecks()
	chk.mu.Lock()
	defer chk.mu.Unlock()
	out := map[ID]bool{}
	for id := range chk.checked {
		out[id] = true
	}
	return out
}

// TestFirstReadChecksItsTensorOnly reads 100 bytes of one tensor of a version three deltas
// behind the latest on a fresh reader: they are exact, the one object checked is that
// tensor's (no pass over the file, no copy of it), a second reader with the same cache
// directory finds the check recorded in the index, and every version reads the same bytes
// checked per tensor as through the reference, the whole-file vouch.
func TestFirstReadChecksItsTensorOnly(t *testing.T) {
	versions, root := committedVersions(t, 4, 81)
	cache := t.TempDir()
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, CacheDir: cache, FileCopyBytes: -1})
	mlp, want := tensorOf(t, r, 1, "model.layers.0.mlp.weight", versions[0])
	f, err := r.OpenFile(1, "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	ver, _ := r.versions.sealedVersion(1)
	hl := ver.files["model.safetensors"].HeaderLen
	got := make([]byte, 100)
	if _, err := f.ReadAt(got, hl+mlp.Begin+pageSize+5); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "100 bytes of the mlp tensor", got, want[pageSize+5:pageSize+105])
	if c := checkedObjects(r); len(c) != 1 || !c[mlp.ID] {
		t.Fatalf("objects checked after a read of one tensor: %v, want the mlp tensor's %s alone", c, mlp.ID)
	}
	if _, n := r.FileCopyUsage(); n != 0 {
		t.Fatalf("%d file copies with copies off", n)
	}
	closeStore(t, r)

	r2 := openStore(t, root, Options{ReadOnly: true, Materialize: true, CacheDir: cache, FileCopyBytes: -1})
	if !r2.mat.contentChecks().checkedObject(mlp.ID) {
		t.Fatalf("the check of %s is not recorded in the index", mlp.ID)
	}
	for v := uint64(1); v <= 4; v++ {
		ver, err := r2.versions.sealedVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range versions[v-1] {
			for _, opts := range []readOpts{{check: true}, {vouch: true}} {
				vf := r2.newVersionFile(ver, ver.files[p], opts)
				b := make([]byte, vf.Size())
				if n, err := vf.ReadAt(b, 0); n != len(b) || (err != nil && n < len(b)) {
					t.Fatalf("v%d %s (%+v): %d bytes, %v", v, p, opts, n, err)
				}
				mustEqualBytes(t, p, b, want)
			}
		}
	}
}

// TestWrongRebuildIsNotServed puts a wrong page of a tensor's content in the page cache, as a
// bug of the replay or damage that no CRC sees would: reads of that tensor fail with
// ErrCorrupt naming the file, the tensor and the object, again after the page is gone (the
// failure is remembered), while the other tensors of the same file read exactly. The
// reference, the whole-file vouch, refuses the file too.
func TestWrongRebuildIsNotServed(t *testing.T) {
	versions, root := committedVersions(t, 4, 82)
	var log logLines
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: -1, Logger: logtest.New(log.logf)})
	emb, embBytes := tensorOf(t, r, 1, "model.embed_tokens.weight", versions[0])
	mlp, mlpBytes := tensorOf(t, r, 1, "model.layers.0.mlp.weight", versions[0])
	v := r.mat.view()
	held := v.holds(emb.ID)
	v.release()
	if held {
		t.Fatal("the copy holds version 1's emb: the test needs it rebuilt")
	}
	page := r.objects.bufs.newPage(min(pageSize, int64(len(embBytes))))
	copy(page.b, embBytes)
	page.b[1000] ^= 1
	r.objects.pages.add(pageKey{emb.ID, 0}, page, page.size())

	for i := 0; i < 2; i++ {
		_, err := readTensor(r, 1, emb)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("read %d of a tensor rebuilt wrong: %v, want ErrCorrupt", i, err)
		}
		for _, part := range []string{"model.safetensors", "model.embed_tokens.weight", emb.ID.String()} {
			if !strings.Contains(err.Error(), part) {
				t.Fatalf("the error does not name %s: %v", part, err)
			}
		}
		r.objects.pages.clear()
	}
	if !log.has("model.embed_tokens.weight", "every read of it fails") {
		t.Fatalf("no warning naming the tensor:\n%s", &log)
	}
	b, err := readTensor(r, 1, mlp)
	if err != nil {
		t.Fatalf("a sound tensor of the same file: %v", err)
	}
	mustEqualBytes(t, "the sound tensor", b, mlpBytes)

	// The reference refuses the file as a whole (a fresh reader, the same wrong page).
	r2 := openStore(t, root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: -1, Logger: logtest.New(func(string, ...any) {})})
	page2 := r2.objects.bufs.newPage(int64(len(page.b)))
	copy(page2.b, page.b)
	r2.objects.pages.add(pageKey{emb.ID, 0}, page2, page2.size())
	ver, _ := r2.versions.sealedVersion(1)
	vf := r2.newVersionFile(ver, ver.files["model.safetensors"], readOpts{vouch: true})
	if _, err := vf.ReadAt(make([]byte, 10), 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("the whole-file vouch over a wrong page: %v, want ErrCorrupt", err)
	}
}

// TestDamageFailsItsTensorOnly is the damage the threat model covers, on a fresh reader each:
// a flipped byte of a tensor's object, and the object file of one tensor holding another's
// content (swapped on disk). Reads of the tensor fail with ErrCorrupt and never return other
// bytes; the file's other tensors read exactly (the checks are per tensor, not per file).
func TestDamageFailsItsTensorOnly(t *testing.T) {
	for _, tc := range []string{"flipped byte", "object file of another tensor"} {
		t.Run(tc, func(t *testing.T) {
			// Object files: the format-2 layout.
			versions := modelVersions(t, 4, 83)
			w, root := newLooseStore(t, Options{})
			commitAll(t, w, versions)
			closeStore(t, w)
			s := openLoose(t, root, Options{ReadOnly: true, FileCopyBytes: -1})
			mlp, _ := tensorOf(t, s, 2, "model.layers.0.mlp.weight", versions[1])
			emb, embBytes := tensorOf(t, s, 2, "model.embed_tokens.weight", versions[1])
			mlpPath := s.be.given.(*localBackend).ObjectPath(mlp.ID)
			embPath := s.be.given.(*localBackend).ObjectPath(emb.ID)
			closeStore(t, s)
			switch tc {
			case "flipped byte":
				flipByte(t, mlpPath)
			default:
				b, err := os.ReadFile(embPath)
				if err != nil {
					t.Fatal(err)
				}
				os.Chmod(mlpPath, 0o600)
				if err := os.WriteFile(mlpPath, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r := openLoose(t, root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: -1, Logger: logtest.New(func(string, ...any) {})})
			expectDamage(r)
			for i := 0; i < 2; i++ {
				b, err := readTensor(r, 2, mlp)
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("read %d of the damaged tensor: %d bytes, %v, want ErrCorrupt", i, len(b), err)
				}
			}
			b, err := readTensor(r, 2, emb)
			if err != nil {
				t.Fatalf("the file's other tensor: %v", err)
			}
			mustEqualBytes(t, "the other tensor", b, embBytes)
			if sha256.Sum256(b) != emb.ID {
				t.Fatal("the other tensor's bytes do not hash to its id")
			}
			mustEqualBytes(t, "config.json", readWhole(t, r, 2, "config.json"), versions[1]["config.json"])
		})
	}
}
