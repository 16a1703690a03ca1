package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/logtest"
)

// moeLikeSeries returns n versions of a file of many small tensors (a mixture of experts' shape:
// odd sizes from 2 to 40 kB, about 5 MB in all, so that pool chunks hold many tensors and
// tensors cross chunks and pages), with a zero-length tensor among them, each version one step
// on from the last (a few tensors changed much: whole copies), and a small file beside it.
func moeLikeSeries(t testing.TB, n int) []map[string][]byte {
	rng := rand.New(rand.NewPCG(29, 5))
	vals := make([][]byte, 240)
	for i := range vals {
		vals[i] = bf16Like(rng, 1+rng.IntN(20_000))
	}
	var out []map[string][]byte
	for v := range n {
		var tensors []testTensor
		for i := range vals {
			if v > 0 {
				frac := 0.01
				if i%37 == v {
					frac = 0.5 // more than an eighth: a whole copy
				}
				vals[i] = perturb(rng, vals[i], 2, frac)
			}
			tensors = append(tensors, testTensor{fmt.Sprintf("model.layers.%d.mlp.experts.%d.up_proj.weight", i/60, i%60), delta.DTypeBF16, []int64{int64(len(vals[i]) / 2)}, vals[i]})
			if i == 100 {
				tensors = append(tensors, testTensor{"empty", delta.DTypeBF16, []int64{0}, nil})
			}
		}
		out = append(out, map[string][]byte{
			"model.safetensors": safetensorsFile(t, tensors...),
			"config.json":       []byte(fmt.Sprintf(`{"step": %d}`, v)),
		})
	}
	return out
}

// TestStreamBatchEqualsReference streams versions of a file of many small tensors into two
// stores, one batching its jobs and sharing pool chunks between tensors (stream_batch.go), one
// on the reference path (a job and a chunk per tensor): every version must store the same
// manifest and objects byte for byte. Without the base in memory the streams write seeds of
// the copy from pool chunks: each seed file must hold the file's bytes exactly. And the
// batching must have happened: far fewer batches than jobs and fewer calls of the seed writer
// than tensors in the batching store, one batch per job in the reference.
func TestStreamBatchEqualsReference(t *testing.T) {
	series := moeLikeSeries(t, 3)
	for _, budget := range []int64{0, 64 << 20} {
		t.Run(fmt.Sprintf("base memory %d", budget), func(t *testing.T) {
			quiet := logtest.New(func(string, ...any) {})
			ref, _ := newStore(t, Options{MaxChain: 2, BaseMemory: budget, Logger: quiet})
			bat, _ := newStore(t, Options{MaxChain: 2, BaseMemory: budget, Logger: quiet})
			ref.ingest.streamReference = true
			rng := rand.New(rand.NewPCG(3, 4))
			seeds := 0
			for i, files := range series {
				v := uint64(i + 1)
				for _, s := range []*Store{ref, bat} {
					w, err := s.NewVersion(v)
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range sortedPaths(files) {
						st, err := w.StreamFile(p)
						if err != nil {
							t.Fatal(err)
						}
						streamWrites(t, rng, st, files[p])
						if err := st.Close(); err != nil {
							t.Fatalf("close %s: %v", p, err)
						}
						if out := len(w.pool.sem); out != 0 {
							t.Fatalf("v%d %s: %d pool chunks still out after Close", v, p, out)
						}
						if p == "model.safetensors" {
							seeds += checkBatching(t, fmt.Sprintf("v%d %s", v, p), s == ref, st, files[p])
						}
						if err := w.AddStream(p, st, 0o644); err != nil {
							t.Fatal(err)
						}
					}
					if _, err := w.Seal(); err != nil {
						t.Fatal(err)
					}
				}
				sameStores(t, fmt.Sprintf("v%d", v), ref, bat, v)
			}
			if budget == 0 && seeds == 0 {
				t.Fatal("no seed of the copy was written: the pool chunks' seeds were not checked")
			}
		})
	}
}

// checkBatching checks what a closed stream of file did in batches (ref: the reference path),
// and the bytes of the seed it wrote, if any (it says 1 then).
func checkBatching(t *testing.T, what string, ref bool, st *FileStream, file []byte) int {
	t.Helper()
	tensors := len(st.hdr.Tensors)
	queued, batches := st.pend.queued, st.pend.batches
	if queued < tensors {
		t.Fatalf("%s: %d jobs for %d tensors", what, queued, tensors)
	}
	switch {
	case ref && batches != queued:
		t.Fatalf("%s: the reference sent %d batches for %d jobs, want one each", what, batches, queued)
	case !ref && batches*10 > queued:
		t.Fatalf("%s: %d batches for %d jobs: not batched", what, batches, queued)
	}
	if !st.keepRoute {
		puts := st.hs.seedPuts.Load()
		if !ref && puts*4 > int64(tensors) {
			t.Fatalf("%s: %d calls of the seed writer for %d tensors: pieces of a chunk not joined", what, puts, tensors)
		}
	}
	sd := st.s.mat.seedFiles()
	sd.mu.Lock()
	ref2, ok := sd.byHash[seedKey{st.wk.entry.SHA256, st.wk.entry.Size}]
	sd.mu.Unlock()
	if !ok {
		return 0 // none (the base in memory), or given up (a slow disk)
	}
	got, err := os.ReadFile(ref2.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, file) {
		t.Fatalf("%s: the seed of the copy holds other bytes (%d, want %d)", what, len(got), len(file))
	}
	return 1
}
