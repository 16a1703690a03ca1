// Package testfiles makes the bytes that store tests commit: random and bf16-like tensors,
// small perturbations of them as a training step makes, and trees of files on disk. It is
// shared by the tests of store and store/s3. It imports nothing of weightfs but the generator,
// so that store's own tests can use it.
package testfiles

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store/pack"
)

// RandomBytes returns n random bytes.
func RandomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// BF16Like returns n bf16 elements with realistic exponents (compressible high bytes).
func BF16Like(rng *rand.Rand, n int) []byte {
	b := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		b[2*i] = byte(rng.Uint32())
		b[2*i+1] = byte(0x3c + rng.IntN(3))
		if rng.IntN(2) == 0 {
			b[2*i+1] |= 0x80
		}
	}
	return b
}

// Perturb returns a copy of b with about frac of its width-byte elements changed by one ULP
// of the low byte.
func Perturb(rng *rand.Rand, b []byte, width int, frac float64) []byte {
	out := append([]byte(nil), b...)
	for i := 0; i < len(b)/width; i++ {
		if rng.Float64() < frac {
			out[i*width]++
		}
	}
	return out
}

// WriteTree writes files (slash-separated paths to contents) under dir and returns dir. It
// writes through an os.Root on dir, so a path may take dir past PATH_MAX.
func WriteTree(t testing.TB, dir string, files map[string][]byte) string {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for name, b := range files {
		p := filepath.FromSlash(name)
		if err := root.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := root.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ShardedSeries is versions of a generated checkpoint of 4 shards, its index json and the
// model's config files (400k parameters, lr 3e-6, the given seed).
func ShardedSeries(t testing.TB, versions int, seed uint64) []map[string][]byte {
	t.Helper()
	cfg := gen.ConfigForParams(400_000, 3e-6, seed)
	cfg.Shards = 4
	m, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string][]byte
	for v := range versions {
		if v > 0 {
			m.Step()
		}
		files, err := m.CheckpointFiles()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, files)
	}
	return out
}

// StoredDigest is the SHA-256 (hex) over every file under dir/objects and dir/versions of a
// local store (or a test S3 server's copy of one), in the order of their slash-separated
// names: each name, its length and its bytes; and how many files it covered.
func StoredDigest(t testing.TB, dir string) (string, int) {
	t.Helper()
	var names []string
	for _, top := range []string{"objects", "versions"} {
		err := filepath.WalkDir(filepath.Join(dir, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			rel, err := filepath.Rel(dir, p)
			names = append(names, filepath.ToSlash(rel))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	h := sha256.New()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		h.Write([]byte(name + "\n"))
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), len(names)
}

// ObjectBytes sums the sizes of the objects of a local store: its loose object files under
// dir/objects, and the records of the packs its pack indexes name (store format 3; a pack's
// table is not an object's): what `weightfs log` must report as the store's total.
func ObjectBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadDir(filepath.Join(dir, "index"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	records := map[[32]byte]int64{}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, "index", name.Name()))
		if err != nil {
			t.Fatal(err)
		}
		x, err := pack.DecodeIndex(b)
		if err != nil {
			t.Fatalf("pack index %s: %v", name.Name(), err)
		}
		for _, p := range x.Packs {
			for _, e := range p.Entries {
				records[e.ID] = e.Length // an id in several packs: one object
			}
		}
	}
	for _, l := range records {
		n += l
	}
	return n
}
