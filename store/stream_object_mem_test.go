package store

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestStreamSmallObjectsInMemory streams versions of many small tensors (a mixture of experts:
// new, then deltas, whole copies and anchors with links) and requires the objects the batch
// path stores, with no temporary object file per tensor: small objects are built in memory
// and put into the open pack (objStream.inMem). With the bound at 0 the same versions take the
// file path, one temporary file per object, and store the same bytes.
func TestStreamSmallObjectsInMemory(t *testing.T) {
	const files, perFile, elems = 2, 48, 512
	rng := rand.New(rand.NewPCG(31, 30))
	ws := make([][]byte, files*perFile)
	var versions []map[string][]byte
	for v := range 4 {
		tree := map[string][]byte{"config.json": []byte(`{"experts": 48}`)}
		for f := range files {
			ts := make([]testTensor, perFile)
			for i := range ts {
				k := f*perFile + i
				switch {
				case v == 0:
					ws[k] = bf16Like(rng, elems)
				case v == 3 && k%3 == 0:
					ws[k] = perturb(rng, ws[k], 2, 0.5) // a whole copy
				default:
					ws[k] = perturb(rng, ws[k], 2, 0.02) // a delta, or an anchor past the chain
				}
				ts[i] = testTensor{fmt.Sprintf("model.layers.%d.mlp.experts.%d.up_proj.weight", f, i), delta.DTypeBF16, []int64{elems}, ws[k]}
			}
			tree[fmt.Sprintf("model-%05d-of-%05d.safetensors", f+1, files)] = safetensorsFile(t, ts...)
		}
		versions = append(versions, tree)
	}
	for _, bound := range []int64{streamMemObject, 0} {
		t.Run(fmt.Sprintf("bound %d", bound), func(t *testing.T) {
			saved := streamMemObject
			streamMemObject = bound
			defer func() { streamMemObject = saved }()
			before := objStreamTemps.Load()
			s := streamAndBatch(t, versions, 3, nil)
			temps := objStreamTemps.Load() - before
			kinds := seriesTookEveryKind(t, s)
			if bound > 0 && temps != 0 {
				t.Errorf("streamed %v objects of small tensors through %d temporary files, want none", kinds, temps)
			}
			if bound == 0 && temps < files*perFile {
				t.Errorf("the file path made %d temporary files, want one per whole object (at least %d)", temps, files*perFile)
			}
			t.Logf("objects %v, %d temporary object files", kinds, temps)
		})
	}
}
