package store

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestObjectNotARegularFileIsCorrupt replaces an object file by an empty directory: the read
// path, Export and Verify must each call it damage naming the object (EIO through a mount),
// never pass the directory's EISDIR on as if it were an I/O error of a good object.
func TestObjectNotARegularFileIsCorrupt(t *testing.T) {
	s, root := newStore(t, Options{})
	versions := modelVersions(t, 2, 9)
	for i, files := range versions {
		commitTree(t, s, uint64(i+1), files)
	}
	ver, _ := s.sealedVersion(2)
	victim := ver.files["model.safetensors"].Tensors[1].ID
	closeStore(t, s)
	p := s.be.(*localBackend).objectPath(victim)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}

	r := openStore(t, root, Options{ReadOnly: true})
	expectDamage(r)
	f, err := r.OpenFile(2, "model.safetensors")
	if err == nil {
		_, err = f.ReadAt(make([]byte, f.Size()), 0)
		f.Close()
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
		t.Errorf("read of a file whose object is a directory: %v, want corrupt naming %s", err, victim)
	}
	if err := r.Export(2, t.TempDir(), nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
		t.Errorf("export with an object that is a directory: %v", err)
	}
	if _, err := r.Verify(nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim.String()) {
		t.Errorf("verify with an object that is a directory: %v", err)
	}
}
