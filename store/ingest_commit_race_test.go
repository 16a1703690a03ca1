package store

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// changingSource is a source file that a writer rewrites while it is ingested, reduced to
// what makes it deterministic: every byte reads as its old value the first time it is read
// and as its new value every time after. Whatever the order of the reads, two reads of the
// same byte disagree where old and new differ.
type changingSource struct {
	mu       sync.Mutex
	old, new []byte
	seen     []bool
}

func newChangingSource(old, new []byte) *changingSource {
	return &changingSource{old: old, new: new, seen: make([]bool, len(old))}
}

func (c *changingSource) ReadAt(b []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for ; n < len(b) && off+int64(n) < int64(len(c.old)); n++ {
		i := off + int64(n)
		if c.seen[i] {
			b[n] = c.new[i]
		} else {
			b[n] = c.old[i]
		}
		c.seen[i] = true
	}
	if n < len(b) {
		return n, errors.New("read past the end")
	}
	return n, nil
}

// A source that changes while it is ingested must fail the add, naming the file, and seal
// nothing: the file hash must be of the bytes stored (a file hash taken from a second read
// would let a version seal with a hash its tensors do not have).
func TestAddFileSourceChangesWhileRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 15))
	const n = 3 << 20 // two tensors of 6 MiB: more than one 4 MiB chunk each
	a, b := bf16Like(rng, n), bf16Like(rng, n)
	v1 := safetensorsFile(t, testTensor{"a", delta.DTypeBF16, []int64{n}, a}, testTensor{"b", delta.DTypeBF16, []int64{n}, b})
	// The same layout with changed values: a trainer saving the next step over it.
	v2 := safetensorsFile(t, testTensor{"a", delta.DTypeBF16, []int64{n}, perturb(rng, a, 2, 0.02)},
		testTensor{"b", delta.DTypeBF16, []int64{n}, perturb(rng, b, 2, 0.02)})
	v3 := safetensorsFile(t, testTensor{"a", delta.DTypeBF16, []int64{n}, perturb(rng, a, 2, 0.03)},
		testTensor{"b", delta.DTypeBF16, []int64{n}, perturb(rng, b, 2, 0.03)})

	s, _ := newStore(t, Options{})
	for _, c := range []struct {
		name     string
		old, new []byte
		base     bool // a version to diff against is sealed first
	}{
		{"no base", v1, v2, false},
		{"against a base", v2, v3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.base {
				commitTree(t, s, 0, map[string][]byte{"model.safetensors": v1})
			}
			latest, _ := s.Latest()
			w, err := s.NewVersion(latest + 1)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			src := newChangingSource(c.old, c.new)
			err = w.AddFile("model.safetensors", src, int64(len(c.old)), 0o644)
			if !errors.Is(err, ErrSourceChanged) || !strings.Contains(err.Error(), "model.safetensors") {
				if err == nil {
					info, serr := w.Seal()
					xerr := s.Export(info.Number, filepath.Join(t.TempDir(), "x"), nil)
					t.Fatalf("add of a changing source succeeded; seal: %v; export of the sealed version: %v", serr, xerr)
				}
				t.Fatalf("add of a changing source: %v", err)
			}
			if _, err := w.Seal(); !errors.Is(err, ErrEmptyVersion) {
				t.Fatalf("seal after the refused add: %v", err)
			}
		})
	}

	// A file that is not safetensors is stored from one read: the bytes read are what is
	// stored and what its hash is of (the first bytes, which tell it from a safetensors file,
	// were read before: here they read as new). Export checks it.
	w, err := s.NewVersion(10)
	if err != nil {
		t.Fatal(err)
	}
	old, new := []byte(strings.Repeat("old config ", 1000)), []byte(strings.Repeat("new config ", 1000))
	if err := w.AddFile("config.txt", newChangingSource(old, new), int64(len(old)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	got := exportHashes(t, s, 10)
	want := treeHashes(t, writeTree(t, t.TempDir(), map[string][]byte{"config.txt": append(append([]byte{}, new[:9]...), old[9:]...)}))
	if got["config.txt"] != want["config.txt"] {
		t.Fatalf("config.txt exported as %s, want the bytes read (%s)", got["config.txt"], want["config.txt"])
	}
}

// Commit compares each source file's size, mtime and ctime before its read with after: a
// file rewritten while commit ran fails the commit, naming the file, and seals nothing.
func TestCommitSourceRewritten(t *testing.T) {
	s, _ := newStore(t, Options{})
	dir := writeTree(t, t.TempDir(), map[string][]byte{"a.bin": []byte("first"), "b.bin": []byte("second")})
	reads := 0
	s.hook = func(point string) error {
		if point == "commit-file-read" {
			if reads++; reads != 2 {
				return nil // a.bin; then b.bin, rewritten after commit read it
			}
			// rsync --inplace, or a trainer still saving: more bytes land in the file.
			f, err := os.OpenFile(filepath.Join(dir, "b.bin"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString(" and more")
			return err
		}
		return nil
	}
	_, err := s.Commit(dir, CommitOptions{})
	if !errors.Is(err, ErrSourceChanged) || !strings.Contains(err.Error(), "b.bin") {
		t.Fatalf("commit of a file rewritten while it was read: %v", err)
	}
	if len(s.Versions()) != 0 {
		t.Fatalf("the refused commit sealed a version: %v", s.Versions())
	}
	s.hook = nil
	info, _ := commitTree(t, s, 0, map[string][]byte{"b.bin": []byte("second and more")})
	if info.Number != 1 {
		t.Fatalf("next commit is version %d", info.Number)
	}
}
