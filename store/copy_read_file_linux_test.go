package store

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/logtest"
)

// wholeCopyVersions are two versions of a model whose file holds one tensor twice (equal
// content, so one object at two offsets) and tensors of odd lengths, so that reads start and
// end anywhere within the copy's chunks; config.json is the same in both.
func wholeCopyVersions(t *testing.T) []map[string][]byte {
	rng := rand.New(rand.NewPCG(51, 52))
	a, twin := bf16Like(rng, 3<<19+7), bf16Like(rng, 70001)
	var out []map[string][]byte
	for v := range 2 {
		if v > 0 {
			a = perturb(rng, a, 2, 0.02)
		}
		out = append(out, map[string][]byte{
			"model.safetensors": safetensorsFile(t,
				testTensor{"a", delta.DTypeBF16, []int64{int64(len(a) / 2)}, a},
				testTensor{"twin.0", delta.DTypeBF16, []int64{70001}, twin},
				testTensor{"small", delta.DTypeBF16, []int64{2500}, bf16Like(rng, 2500)},
				testTensor{"twin.1", delta.DTypeBF16, []int64{70001}, twin},
			),
			"config.json": []byte(`{"model_type":"llama"}`),
		})
	}
	return out
}

// TestWholeCopyReadsMatchReference reads the latest version's files, and the unchanged file of
// the version before, through ReadAt and ReadSlices at random places, with the copy in the
// page cache and evicted from it (O_DIRECT), and compares with the reference path that reads
// the objects alone: the bytes must be equal and every read served from the copy as one
// file (one part per MiB, counted as copy hits).
func TestWholeCopyReadsMatchReference(t *testing.T) {
	versions := wholeCopyVersions(t)
	s, _ := newStore(t, Options{})
	commitAll(t, s, versions)
	rng := rand.New(rand.NewPCG(53, 54))
	for _, c := range []struct {
		v    uint64
		path string
	}{{2, "model.safetensors"}, {2, "config.json"}, {1, "config.json"}} {
		f, err := s.OpenFile(c.v, c.path)
		if err != nil {
			t.Fatal(err)
		}
		want := versions[c.v-1][c.path]
		ver, err := s.versions.sealedVersion(c.v)
		if err != nil {
			t.Fatal(err)
		}
		ref := s.newVersionFile(ver, ver.files[c.path], readOpts{noMaterialized: true})
		if got := readAllAt(t, ref, int64(len(want))); !bytes.Equal(got, want) {
			t.Fatalf("v%d %s: the reference path reads other bytes", c.v, c.path)
		}
		vf := f.(*versionFile)
		if v := s.mat.view(); v == nil {
			t.Fatal("no copy")
		} else if _, whole := vf.copyWhole(v); !whole {
			v.release()
			t.Fatalf("v%d %s: the copy does not hold it whole", c.v, c.path)
		} else {
			v.release()
		}
		for trial := range 80 {
			if trial%20 == 0 {
				evictCopy(t, s.mat)
			}
			off := rng.Int64N(int64(len(want)) + 10)
			size := 1 + rng.IntN(3<<20)
			hits := s.stats.copyHits.Load()
			p, q := make([]byte, size), make([]byte, size)
			parts, release, n, err := f.(SliceReader).ReadSlices(p, off)
			wn, werr := ref.ReadAt(q, off)
			if n != wn || !errors.Is(err, werr) {
				t.Fatalf("v%d %s at %d+%d: ReadSlices %d, %v; the reference %d, %v", c.v, c.path, off, size, n, err, wn, werr)
			}
			if got := bytes.Join(parts, nil); !bytes.Equal(got, q[:wn]) {
				t.Fatalf("v%d %s at %d+%d: ReadSlices differs from the reference", c.v, c.path, off, size)
			}
			release()
			if n > 0 && len(parts) > (n+pageSize-1)/pageSize {
				t.Fatalf("v%d %s at %d+%d: %d bytes in %d parts, want one per MiB", c.v, c.path, off, size, n, len(parts))
			}
			an, aerr := f.ReadAt(p, off)
			if an != wn || !errors.Is(aerr, werr) || !bytes.Equal(p[:an], q[:wn]) {
				t.Fatalf("v%d %s at %d+%d: ReadAt %d, %v differs from the reference", c.v, c.path, off, size, an, aerr)
			}
			if wn > 0 && s.stats.copyHits.Load()-hits != 2 {
				t.Fatalf("v%d %s at %d+%d: %d copy hits for two reads, want 2 (one each: the file whole)", c.v, c.path, off, size, s.stats.copyHits.Load()-hits)
			}
		}
	}
}

// readAllAt reads n bytes of f from its start.
func readAllAt(t *testing.T, f io.ReaderAt, n int64) []byte {
	t.Helper()
	b := make([]byte, n)
	if got, err := f.ReadAt(b, 0); int64(got) != n || err != nil && err != io.EOF {
		t.Fatalf("read %d of %d bytes: %v", got, n, err)
	}
	return b
}

// TestWholeCopyDamageAfterCheck reads the latest version through an open file, then changes a
// byte of the copy's file under it (the bytes already read were checked), in the page cache and
// on the disk with the pages evicted (O_DIRECT): the next reads of those bytes, through
// ReadSlices and ReadAt, return the version's exact bytes from the objects, never the changed
// byte, and the damaged chunk is logged.
func TestWholeCopyDamageAfterCheck(t *testing.T) {
	versions := wholeCopyVersions(t)
	want := versions[1]["model.safetensors"]
	const off = 1_000_003
	for _, evict := range []bool{false, true} {
		var log logLines
		s, _ := newStore(t, Options{Logger: logtest.New(log.logf)})
		commitAll(t, s, versions)
		f, err := s.OpenFile(2, "model.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		if got := readAllAt(t, f, int64(len(want))); !bytes.Equal(got, want) {
			t.Fatal("the first read differs")
		}
		flipCopyByte(t, s.cache.dir, "model.safetensors", off)
		if evict {
			evictCopy(t, s.mat)
		}
		p := make([]byte, 1<<20)
		at := int64(off - 5000)
		parts, release, n, err := f.(SliceReader).ReadSlices(p, at)
		if err != nil || n != len(p) {
			t.Fatalf("evict %v: ReadSlices after the damage: %d, %v", evict, n, err)
		}
		mustEqualBytes(t, "ReadSlices after the damage", bytes.Join(parts, nil), want[at:at+int64(n)])
		release()
		q := make([]byte, 1<<20)
		if n, err := f.ReadAt(q, at); err != nil || n != len(q) {
			t.Fatalf("evict %v: ReadAt after the damage: %d, %v", evict, n, err)
		}
		mustEqualBytes(t, "ReadAt after the damage", q, want[at:at+int64(len(q))])
		if !log.has("chunk", "does not match") && !log.has("materialized copy", "chunk") {
			t.Errorf("evict %v: the damaged chunk is not logged; log:\n%s", evict, log.String())
		}
		closeStore(t, s)
	}
}
