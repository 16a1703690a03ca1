package store

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestCommitPatchFastEqualsReference: on random models and random changes (none, a few
// elements, 1%, the first and last elements, a third: an anchor; tensors across the ingest's
// 4 MiB chunks; dtypes of every width; a header changed in place; a file the patch leaves
// out), the fast path and the reference path of CommitPatch seal the same manifest and
// store the same objects, byte for byte, with the base in memory and without; the fast path
// made every patched file; and a third version, patched onto the second, agrees too. The
// fast path runs as one pass per file (split 1) and split over goroutines (2, 3:
// ingest_patch_split.go), which must not change a byte either.
func TestCommitPatchFastEqualsReference(t *testing.T) {
	for seed := range uint64(3) {
		mem := int64(0)
		if seed == 1 {
			mem = 64 << 20
		}
		split := []int{1, 3, 2}[seed]
		t.Run(fmt.Sprintf("seed=%d,base_memory=%d,split=%d", seed, mem, split), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 31))
			versions := randomPatchModels(t, rng, 3)
			full, _ := newStore(t, Options{})
			commitAll(t, full, versions)
			fast, _ := newStore(t, Options{BaseMemory: mem})
			ref, _ := newStore(t, Options{BaseMemory: mem})
			ref.ingest.patchReference = true
			fast.ingest.patchSplit = split
			commitTree(t, fast, 1, versions[0])
			commitTree(t, ref, 1, versions[0])
			for v := uint64(2); v <= 3; v++ {
				var patch bytes.Buffer
				if _, err := full.WritePatch(v, &writerAtBuffer{&patch}); err != nil {
					t.Fatal(err)
				}
				p, err := delta.OpenPatch(bytes.NewReader(patch.Bytes()), int64(patch.Len()))
				if err != nil {
					t.Fatal(err)
				}
				byTensor := 0
				for _, f := range p.Plan.Files {
					if !f.Whole {
						byTensor++
					}
				}
				before := fast.ingest.patchFast.Load()
				for _, s := range []*Store{fast, ref} {
					if _, err := s.CommitPatch(bytes.NewReader(patch.Bytes()), int64(patch.Len()), v); err != nil {
						t.Fatalf("version %d: %v", v, err)
					}
				}
				if n := fast.ingest.patchFast.Load() - before; n != int64(byTensor) || n == 0 {
					t.Fatalf("version %d: the fast path made %d of the %d files patched by tensor", v, n, byTensor)
				}
				mf, mr := manifestOf(t, fast, v), manifestOf(t, ref, v)
				if !reflect.DeepEqual(mf.Files, mr.Files) || !reflect.DeepEqual(mf.Dirs, mr.Dirs) || mf.Stats != mr.Stats {
					t.Fatalf("version %d: the fast path's manifest differs from the reference's:\n%+v\n%+v", v, mf.Files, mr.Files)
				}
				if mi := manifestOf(t, full, v); !reflect.DeepEqual(mf.Files, mi.Files) {
					t.Fatalf("version %d: the fast path's manifest differs from a full ingest's", v)
				}
				if of, or := storedObjects(t, fast), storedObjects(t, ref); !reflect.DeepEqual(of, or) {
					t.Fatalf("version %d: the fast path stored %d objects, the reference %d, or other bytes", v, len(of), len(or))
				}
				for path, content := range versions[v-1] {
					mustEqualBytes(t, path, readWhole(t, fast, v, path), content)
				}
				if mem > 0 {
					// The base in memory holds every tensor of the version, the files the
					// patch left alone too, for the next version's diffs.
					want := map[ID]int64{}
					for _, f := range mf.Files {
						for _, x := range f.Tensors {
							want[x.ID] = x.End - x.Begin
						}
					}
					var bytes int64
					for _, n := range want {
						bytes += n
					}
					if got := fast.BaseMemory(); got.Version != v || got.Bytes != bytes {
						t.Fatalf("version %d: the base in memory holds %d bytes of version %d, want %d of version %d", v, got.Bytes, got.Version, bytes, v)
					}
				}
			}
		})
	}
}

// storedObjects maps every object of s to the SHA-256 of its stored file.
func storedObjects(t testing.TB, s *Store) map[ID][32]byte {
	t.Helper()
	out := map[ID][32]byte{}
	err := s.be.ListObjects(func(id ID, size int64) error {
		f, err := s.be.OpenObject(id)
		if err != nil {
			return err
		}
		defer f.Close()
		b := make([]byte, f.Size())
		if _, err := f.ReadAt(b, 0); err != nil {
			return err
		}
		out[id] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// randomPatchModels makes n versions of a random model: two safetensors files whose tensors
// change between versions by random amounts, one file that never changes, one whose header
// changes in place, and a config.
func randomPatchModels(t testing.TB, rng *rand.Rand, n int) []map[string][]byte {
	type tensor struct {
		name  string
		dtype delta.DType
		shape []int64
		data  []byte
	}
	dtypes := []delta.DType{delta.DTypeBF16, delta.DTypeF32, delta.DTypeU8, delta.DTypeF64, delta.DTypeF16}
	newTensors := func(prefix string, k int) []tensor {
		var ts []tensor
		for i := range k {
			dt := dtypes[rng.IntN(len(dtypes))]
			elems := 1 + rng.IntN(20_000)
			if i == 0 && prefix == "a" {
				dt, elems = delta.DTypeBF16, (4<<20)/2+1_000 // across the 4 MiB chunk
			}
			data := make([]byte, elems*dt.Size())
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
			ts = append(ts, tensor{fmt.Sprintf("%s.%d", prefix, i), dt, []int64{int64(elems)}, data})
		}
		return ts
	}
	change := func(data []byte, width int) []byte {
		out := bytes.Clone(data)
		elems := len(out) / width
		flip := func(e int) { out[e*width+rng.IntN(width)] ^= byte(1 + rng.IntN(255)) }
		switch rng.IntN(5) {
		case 0: // unchanged
		case 1:
			for range 1 + rng.IntN(5) {
				flip(rng.IntN(elems))
			}
		case 2:
			flip(0)
			flip(elems - 1)
		case 3:
			for range max(1, elems/100) {
				flip(rng.IntN(elems))
			}
		default:
			for range elems / 3 {
				flip(rng.IntN(elems))
			}
		}
		return out
	}
	file := func(meta map[string]string, ts []tensor) []byte {
		hdr := make([]delta.Tensor, len(ts))
		for i, x := range ts {
			hdr[i] = delta.Tensor{Name: x.name, DType: x.dtype, Shape: x.shape}
		}
		out, err := delta.EncodeHeader(meta, hdr)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			out = append(out, x.data...)
		}
		return out
	}
	a, b, o, m := newTensors("a", 4), newTensors("b", 3), newTensors("o", 2), newTensors("m", 1)
	var out []map[string][]byte
	for v := range n {
		if v > 0 {
			for _, ts := range [][]tensor{a, b, m} {
				for i := range ts {
					ts[i].data = change(ts[i].data, ts[i].dtype.Size())
				}
			}
		}
		out = append(out, map[string][]byte{
			"model-00001-of-00002.safetensors": file(nil, a),
			"model-00002-of-00002.safetensors": file(nil, b),
			"sub/frozen.safetensors":           file(nil, o),
			"meta.safetensors":                 file(map[string]string{"step": fmt.Sprint(v)}, m),
			"config.json":                      []byte(fmt.Sprintf(`{"step":%d}`, v)),
		})
	}
	return out
}
