package store

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// classifyAgree fails unless classifyHeader and classifyHeaderReference decide the same for
// the first headerNeed bytes of prefix (when it holds them), and reports the class.
func classifyAgree(t *testing.T, prefix []byte) streamClass {
	t.Helper()
	need := headerNeed(prefix)
	if need >= 0 && int64(len(prefix)) < need {
		return classUndecided
	}
	if need >= 0 {
		prefix = prefix[:need]
	}
	c, h, size := classifyHeader(prefix)
	rc, rh, rsize := classifyHeaderReference(prefix)
	if c != rc || size != rsize || !reflect.DeepEqual(h, rh) {
		t.Fatalf("classify %q:\nfast      %v %+v %d\nreference %v %+v %d", prefix, c, h, size, rc, rh, rsize)
	}
	return c
}

// TestClassifyHeaderMatchesReference: the stream's one-parse classification of a header
// equals the reference's guess-then-parse on writers' headers and on mutations of them
// (offsets moved, entries repeated, fields dropped, JSON broken).
func TestClassifyHeaderMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	dtypes := []delta.DType{delta.DTypeBF16, delta.DTypeF32, delta.DTypeU8, delta.DTypeI64}
	edits := []string{"0", "9", "1,", ",", "[", "]", "{", "}", `"`, " ", "-", "1.5", `"data_offsets":[0,4],`, "null"}
	count := map[streamClass]int{}
	for i := range 800 {
		var tensors []delta.Tensor
		for j := range rng.IntN(6) {
			shape := make([]int64, rng.IntN(3))
			for k := range shape {
				shape[k] = int64(rng.IntN(4))
			}
			tensors = append(tensors, delta.Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.weight", i, j),
				DType: dtypes[rng.IntN(len(dtypes))], Shape: shape})
		}
		var meta map[string]string
		if i%3 == 0 {
			meta = map[string]string{"format": "pt"}
		}
		hdr, err := delta.EncodeHeader(meta, tensors)
		if err != nil {
			t.Fatal(err)
		}
		count[classifyAgree(t, hdr)]++
		js := []byte(string(hdr[8:]))
		for range 1 + rng.IntN(2) {
			p := rng.IntN(len(js) + 1)
			switch rng.IntN(3) {
			case 0:
				js = append(js[:p:p], append([]byte(edits[rng.IntN(len(edits))]), js[p:]...)...)
			case 1:
				js = append(js[:p:p], js[min(len(js), p+1+rng.IntN(3)):]...)
			case 2:
				q := min(len(js), p+rng.IntN(70))
				js = append(js[:q:q], append([]byte(string(js[p:q])), js[q:]...)...)
			}
		}
		count[classifyAgree(t, append(binary.LittleEndian.AppendUint64(nil, uint64(len(js))), js...))]++
	}
	if count[classSafetensors] < 800 || count[classBlobUnsure] < 100 {
		t.Fatalf("classes %v: the test does not exercise both", count)
	}
}
