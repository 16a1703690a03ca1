package store

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// modelVersions builds n versions of a small model: three bf16 tensors evolving by small
// sparse changes, one that never changes, plus a config file and a subdirectory.
func modelVersions(t testing.TB, n int, seed uint64) []map[string][]byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	emb := bf16Like(rng, 300_000) // 600 KB: spans a page boundary of the read path
	mlp := bf16Like(rng, 700_000) // 1.4 MB: several pages
	norm := bf16Like(rng, 64)
	f32 := randomBytes(rng, 4*1000)
	var out []map[string][]byte
	for v := 0; v < n; v++ {
		if v > 0 {
			emb = perturb(rng, emb, 2, 0.01)
			mlp = perturb(rng, mlp, 2, 0.02)
			f32 = perturb(rng, f32, 4, 0.05)
		}
		out = append(out, map[string][]byte{
			"model.safetensors": safetensorsFile(t,
				testTensor{"model.embed_tokens.weight", delta.DTypeBF16, []int64{300, 1000}, emb},
				testTensor{"model.layers.0.mlp.weight", delta.DTypeBF16, []int64{700, 1000}, mlp},
				testTensor{"model.norm.weight", delta.DTypeBF16, []int64{64}, norm},
				testTensor{"lm_head.bias", delta.DTypeF32, []int64{1000}, f32},
			),
			"config.json":         []byte(`{"model_type":"llama","hidden_size":1000}`),
			"tokenizer/vocab.txt": []byte(fmt.Sprintf("hello\nworld\n%d\n", v%2)),
		})
	}
	return out
}

func TestRoundTripSeveralVersions(t *testing.T) {
	s, _ := newStore(t, Options{})
	versions := modelVersions(t, 5, 1)
	want := map[uint64]map[string]string{}
	for i, files := range versions {
		v := uint64(1 + 2*i) // 1, 3, 5, 7, 9: numbers need not be contiguous
		info, dir := commitTree(t, s, v, files)
		want[v] = treeHashes(t, dir)
		if info.Number != v {
			t.Fatalf("committed version %d, info says %d", v, info.Number)
		}
		t.Logf("v%d: logical %d stored %d changed %d/%d", v, info.LogicalBytes, info.StoredBytes, info.ChangedElems, info.TotalElems)
		if i > 0 && info.StoredBytes*10 > info.LogicalBytes {
			t.Errorf("v%d stores %d of %d bytes: deltas are not small", v, info.StoredBytes, info.LogicalBytes)
		}
	}
	for v, w := range want {
		sameTree(t, fmt.Sprintf("export of v%d", v), exportHashes(t, s, v), w)
	}
	if got := len(s.Versions()); got != 5 {
		t.Fatalf("%d versions, want 5", got)
	}
	if latest, _ := s.Latest(); latest != 9 {
		t.Fatalf("latest %d, want 9", latest)
	}
	// A fresh reader (no materialized copy) exports the same bytes.
	r := openStore(t, s.Root(), Options{ReadOnly: true})
	for v, w := range want {
		sameTree(t, fmt.Sprintf("reader export of v%d", v), exportHashes(t, r, v), w)
	}
	if _, err := r.Verify(nil); err != nil {
		t.Fatal(err)
	}
}
