package gen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestMoEChangedFraction is the MoE realism check, counted from the bytes of consecutive
// checkpoints of the medium-moe preset at lr 3e-6. The experts a step routes to change about
// as much as the dense model's linears; the others change too (Adam's first moment carries
// the step), less the longer they have gone unrouted (beta1^n); nearly every tensor changes
// at every step. Measured (seed 1, 8 steps): routed 1.9%, unrouted 1 step 1.8%, 2-4 steps
// 1.6%, 5 or more 1.1%.
func TestMoEChangedFraction(t *testing.T) {
	c := mustPreset(t, "medium-moe", 3e-6, 1)
	m := steppedModel(t, c, 0)
	prev := checkpointTensors(t, mustCheckpoint(t, m))
	idle := warmIdleSteps(c) // steps since each expert was last routed
	// Changed and total elements of expert tensors by routing: routed this step, unrouted
	// for 1, 2-4 and 5 or more steps.
	var buckets [4][2]int64
	bucketOf := func(n int) int {
		switch {
		case n == 0:
			return 0
		case n == 1:
			return 1
		case n <= 4:
			return 2
		}
		return 3
	}
	const steps = 8
	for step := 1; step <= steps; step++ {
		m.Step()
		files, err := m.CheckpointFiles()
		if err != nil {
			t.Fatal(err)
		}
		cur := checkpointTensors(t, files)
		route := routingAt(c, warmStartSteps+step)
		for layer := range idle {
			for x := range idle[layer] {
				idle[layer][x]++
				if route[layer][x] {
					idle[layer][x] = 0
				}
			}
		}
		var tensors, changedTensors int
		for i := range m.lay.tensors {
			ts := &m.lay.tensors[i]
			if ts.kind == kindNorm {
				continue
			}
			changed, _, total := changeStats(t, map[string][]byte{ts.name: prev[ts.name]}, map[string][]byte{ts.name: cur[ts.name]})
			tensors++
			if changed > 0 {
				changedTensors++
			}
			if ts.expert >= 0 {
				b := &buckets[bucketOf(idle[ts.layer][ts.expert])]
				b[0] += changed
				b[1] += total
			}
		}
		if changedTensors < tensors*95/100 {
			t.Errorf("step %d: only %d of %d tensors changed", step, changedTensors, tensors)
		}
		prev = cur
	}
	var frac [4]float64
	for i, b := range buckets {
		if b[1] < 100_000 {
			t.Fatalf("bucket %d: only %d elements", i, b[1])
		}
		frac[i] = float64(b[0]) / float64(b[1])
	}
	t.Logf("changed per step: routed %.3f%%, unrouted 1 step %.3f%%, 2-4 steps %.3f%%, 5+ steps %.3f%%", 100*frac[0], 100*frac[1], 100*frac[2], 100*frac[3])
	if frac[0] < 0.015 || frac[0] > 0.035 {
		t.Errorf("routed experts: %.3f%% changed, want 1.5%%-3.5%%", 100*frac[0])
	}
	for i := 1; i < len(frac); i++ {
		if frac[i] >= frac[i-1] {
			t.Errorf("experts unrouted longer change no less: %.3f%% after %.3f%%", 100*frac[i], 100*frac[i-1])
		}
	}
	if frac[3] < 0.002 || frac[3] > 0.7*frac[0] {
		t.Errorf("experts unrouted 5+ steps: %.3f%% changed, want 0.2%% to 0.7 of the routed %.3f%%", 100*frac[3], 100*frac[0])
	}
}

// TestMoEShardedCheckpoint writes a checkpoint of over 20,000 tensors in 8 shards to disk and
// reads it back with delta's safetensors parser: the index lists every tensor exactly once,
// each file holds exactly the tensors the index maps to it with the shapes Tensors reports,
// and total_size is the bytes of all tensors.
func TestMoEShardedCheckpoint(t *testing.T) {
	c := moeShape(52, 128, 8, 0)
	c.Shards = 8
	infos, err := c.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) < 20_000 {
		t.Fatalf("%d tensors", len(infos))
	}
	dir := t.TempDir()
	if err := StreamCheckpoint(c, 1, dir); err != nil {
		t.Fatal(err)
	}
	var index struct {
		Metadata struct {
			TotalSize int64 `json:"total_size"`
		} `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &index); err != nil {
		t.Fatal(err)
	}
	if len(index.WeightMap) != len(infos) {
		t.Errorf("index maps %d tensors, the model has %d", len(index.WeightMap), len(infos))
	}
	inFile := map[string][]delta.Tensor{}
	var dataBytes int64
	for k := 1; k <= 8; k++ {
		name := fmt.Sprintf("model-%05d-of-00008.safetensors", k)
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		h, err := delta.ParseHeader(b, int64(len(b)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		inFile[name] = h.Tensors
		dataBytes += int64(len(b)) - h.DataStart()
	}
	if index.Metadata.TotalSize != dataBytes {
		t.Errorf("total_size %d, files hold %d bytes of tensors", index.Metadata.TotalSize, dataBytes)
	}
	byName := map[string]TensorInfo{}
	for _, in := range infos {
		byName[in.Name] = in
	}
	found := map[string]int{}
	for file, tensors := range inFile {
		if len(tensors) == 0 {
			t.Errorf("%s is empty", file)
		}
		for _, ts := range tensors {
			found[ts.Name]++
			in := byName[ts.Name]
			if index.WeightMap[ts.Name] != file || in.File != file || !slices.Equal(ts.Shape, in.Shape) || ts.DType != delta.DTypeBF16 {
				t.Fatalf("%s in %s (%v %v): index says %q, Tensors says %+v", ts.Name, file, ts.DType, ts.Shape, index.WeightMap[ts.Name], in)
			}
		}
	}
	for _, in := range infos {
		if found[in.Name] != 1 {
			t.Errorf("%s is in %d files", in.Name, found[in.Name])
		}
	}
	// The bytes are the in-memory model's.
	want := mustCheckpoint(t, steppedModel(t, c, 1))
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, w) {
			t.Errorf("%s differs from the in-memory model's (%v)", name, err)
		}
	}
}
