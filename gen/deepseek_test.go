package gen

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// goldenDeepSeek pins the bytes of deepseekTestConfig (lr 3e-6, seed 1) at versions 1 and 3:
// only update it on purpose.
var goldenDeepSeek = map[int]string{
	0: "e51442b8e99b81d5b6d72e4b935fa6947872b11efffaa583e68c45271273ba18",
	2: "8b6b81d01ec7ef7be1e7df38d0a54ade0e0af1c6b215a6704bcb9c89164fdb6e",
}

// deepseekShape is a DeepSeek-V3-named model with tiny widths.
func deepseekShape(layers, experts, topK, shared int) Config {
	c := moeShape(layers, experts, topK, shared)
	c.MoE.DeepSeek = true
	return c
}

// referenceE4M3 rounds f to the nearest float8_e4m3fn by comparing distances with every
// finite code (ties to the even code), saturating at +-448.
func referenceE4M3(f float32) uint8 {
	if f != f {
		return 0x7f | uint8(math.Float32bits(f)>>24)&0x80
	}
	sign := uint8(0)
	x := float64(f)
	if x < 0 || (x == 0 && math.Signbit(x)) {
		sign, x = 0x80, -x
	}
	best, bestD := uint8(0), math.Inf(1)
	for q := uint8(0); q <= 0x7e; q++ {
		d := math.Abs(float64(e4m3ToF32(q)) - x)
		if d < bestD || (d == bestD && q&1 == 0) {
			best, bestD = q, d
		}
	}
	return sign | best
}

func TestE4M3MatchesReference(t *testing.T) {
	var xs []float32
	for q := range 0x7f {
		v := e4m3ToF32(uint8(q))
		next := e4m3ToF32(uint8(q + 1))
		if q == 0x7e {
			next = 480 // past the largest finite value: saturates
		}
		mid := (v + next) / 2
		xs = append(xs, v, mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, 1000), -v, -mid)
	}
	s := newStream(1, 99, 0)
	for i := range uint64(20000) {
		u := s.at(i)
		xs = append(xs, float32(normal(u))*float32(math.Ldexp(1, int(u%24)-12)))
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), 448, 449, 464, 1e9, -1e9, 1e-30)
	for _, x := range xs {
		if got, want := f32ToE4M3(x), referenceE4M3(x); got != want {
			t.Fatalf("f32ToE4M3(%g) = %#x (%g), reference %#x (%g)", x, got, e4m3ToF32(got), want, e4m3ToF32(want))
		}
	}
	if e4m3ToF32(0x7e) != 448 || e4m3ToF32(0x08) != 1.0/64 || e4m3ToF32(0x01) != 1.0/512 || e4m3ToF32(0xb8) != -1 {
		t.Error("e4m3ToF32 decodes 0x7e, 0x08, 0x01, 0xb8 wrongly")
	}
}

func TestDeepSeekNamesAndCounts(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		tensors int
	}{
		// 3 dense layers of 20 tensors, 58 MoE layers of 12 + 2 + 6*256 + 6 + 2.
		{"DeepSeek-V3's 61 layers x 256 experts + shared", deepseekShape(61, 256, 8, 8), 3*20 + 58*1558 + 3},
		{"no shared expert", deepseekShape(5, 16, 4, 0), 3*20 + 2*(12+2+96+2) + 3},
		{"one layer: no dense layer", deepseekShape(1, 4, 2, 8), 12 + 2 + 24 + 6 + 2 + 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			infos, err := tc.cfg.Tensors()
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) != tc.tensors {
				t.Fatalf("%d tensors, want %d", len(infos), tc.tensors)
			}
			byName := map[string]TensorInfo{}
			var params int64
			for _, in := range infos {
				if _, dup := byName[in.Name]; dup {
					t.Fatalf("%s twice", in.Name)
				}
				byName[in.Name] = in
				n := int64(1)
				for _, d := range in.Shape {
					n *= d
				}
				if !strings.HasSuffix(in.Name, "_scale_inv") {
					params += n
				}
				wantDType := "BF16"
				switch {
				case strings.HasSuffix(in.Name, ".weight_scale_inv"), strings.HasSuffix(in.Name, "e_score_correction_bias"):
					wantDType = "F32"
				case strings.HasSuffix(in.Name, "proj.weight") || strings.HasSuffix(in.Name, "proj_with_mqa.weight"):
					wantDType = "F8_E4M3"
				}
				if in.Name == "lm_head.weight" || in.Name == "model.embed_tokens.weight" {
					wantDType = "BF16"
				}
				if in.DType != wantDType {
					t.Errorf("%s: %s, want %s", in.Name, in.DType, wantDType)
				}
				if w, ok := strings.CutSuffix(in.Name, "_scale_inv"); ok {
					sh := byName[w].Shape
					if want := []int64{(sh[0] + 127) / 128, (sh[1] + 127) / 128}; !slices.Equal(in.Shape, want) {
						t.Errorf("%s: shape %v, want %v", in.Name, in.Shape, want)
					}
				}
			}
			if params != tc.cfg.ParamCount() {
				t.Errorf("tensors hold %d parameters, ParamCount says %d", params, tc.cfg.ParamCount())
			}
			last := tc.cfg.Layers - 1
			for _, name := range []string{
				"model.layers.%d.self_attn.q_a_proj.weight_scale_inv", "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight",
				"model.layers.%d.self_attn.kv_a_layernorm.weight", "model.layers.%d.mlp.gate.e_score_correction_bias",
				"model.layers.%d.mlp.experts.3.down_proj.weight_scale_inv", "model.layers.%d.post_attention_layernorm.weight",
			} {
				if _, ok := byName[fmt.Sprintf(name, last)]; !ok {
					t.Errorf("no %s", fmt.Sprintf(name, last))
				}
			}
			if tc.cfg.Layers > 3 {
				if _, ok := byName["model.layers.0.mlp.gate_proj.weight"]; !ok {
					t.Error("layer 0 is not dense")
				}
			}
		})
	}
}

// deepseekTestConfig has experts wider than one block (160 x 256: 2 x 2 blocks, the last
// ones partial) and fp8 tensors of odd sizes (kv_a_proj_with_mqa), so F32 scales sit at
// offsets that are not multiples of 4 and write buffers split them.
func deepseekTestConfig() Config {
	c := Config{Layers: 2, Hidden: 256, Intermediate: 704, Heads: 4, KVHeads: 4, Vocab: 512, LR: 3e-6, Seed: 1,
		MoE: MoE{Experts: 8, TopK: 2, ExpertIntermediate: 160, SharedIntermediate: 160, DeepSeek: true}}
	return c
}

// TestDeepSeekCheckpoint writes a sharded DeepSeek checkpoint, streamed and from memory (the
// same bytes), reads it with delta's parser, and checks every fp8 block against its scale and
// the fp32 master weights: scale = amax/448, q = e4m3(w/scale), the block's largest |q| 448.
func TestDeepSeekCheckpoint(t *testing.T) {
	// Odd widths (255 = 5 heads of 51, experts 161 wide): partial blocks, fp8 tensors of odd
	// sizes, and with this vocabulary the first write buffer ends inside a float32 scale
	// (byte 3 of model.layers.1.mlp.experts.4.up_proj.weight_scale_inv).
	odd := Config{Layers: 2, Hidden: 255, Intermediate: 705, Heads: 5, KVHeads: 5, Vocab: 777, LR: 3e-6, Seed: 1,
		MoE: MoE{Experts: 27, TopK: 2, ExpertIntermediate: 161, SharedIntermediate: 161, DeepSeek: true}}
	if name := splitF32(newLayout(odd)); name == "" {
		t.Fatal("no write buffer ends inside a float32 element: the odd config no longer tests it")
	}
	for _, tc := range []struct {
		name   string
		cfg    Config
		shards int
	}{{"3 shards", deepseekTestConfig(), 3}, {"odd widths, one file, a scale split by a buffer", odd, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.Shards = tc.shards
			checkDeepSeekCheckpoint(t, c)
		})
	}
}

// splitF32 names the first float32 tensor of a one-file layout that a write buffer's edge cuts
// inside an element, or "".
func splitF32(lay *layout) string {
	off := int64(len(safetensorsHeader(lay, lay.files[0])))
	for _, ti := range lay.files[0] {
		ts := &lay.tensors[ti]
		end := off + ts.bytes()
		for edge := int64(writeBufBytes); edge < end; edge += writeBufBytes {
			if edge > off && ts.dtype == dtF32 && (edge-off)%4 != 0 {
				return ts.name
			}
		}
		off = end
	}
	return ""
}

func checkDeepSeekCheckpoint(t *testing.T, c Config) {
	m := steppedModel(t, c, 1)
	files := mustCheckpoint(t, m)
	for _, workers := range []int{1, 3} {
		sc := c
		sc.Workers = workers
		streamed, err := StreamCheckpointFiles(sc, 1)
		if err != nil {
			t.Fatal(err)
		}
		if filesDigest(streamed) != filesDigest(files) {
			t.Fatalf("workers %d: streamed checkpoint differs", workers)
		}
	}
	var cfg map[string]any
	if err := json.Unmarshal(files["config.json"], &cfg); err != nil || cfg["model_type"] != "deepseek_v3" || cfg["n_shared_experts"] != 1.0 || cfg["first_k_dense_replace"] != 1.0 {
		t.Errorf("config.json %v (%v)", cfg, err)
	}
	data := map[string][]byte{}
	dtypes := map[string]delta.DType{}
	for _, name := range m.lay.fileNames() {
		b := files[name]
		h, err := delta.ParseHeader(b, int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		for _, ts := range h.Tensors {
			data[ts.Name] = b[h.DataStart()+ts.Begin : h.DataStart()+ts.End]
			dtypes[ts.Name] = ts.DType
		}
	}
	checked := 0
	for ti := range m.lay.tensors {
		ts := &m.lay.tensors[ti]
		if ts.dtype != dtF8E4M3 {
			continue
		}
		q, scales := data[ts.name], data[ts.name+"_scale_inv"]
		if dtypes[ts.name] != delta.DTypeF8E4M3 || dtypes[ts.name+"_scale_inv"] != delta.DTypeF32 {
			t.Fatalf("%s: dtypes %s, %s", ts.name, dtypes[ts.name], dtypes[ts.name+"_scale_inv"])
		}
		in := ts.shape[1]
		cb := (in + 127) / 128
		blockMax := map[int64]float32{}
		for i, w := range m.w[ti] {
			r, j := int64(i)/in, int64(i)%in
			k := r/128*cb + j/128
			blockMax[k] = max(blockMax[k], float32(math.Abs(float64(w))))
		}
		for i, w := range m.w[ti] {
			r, j := int64(i)/in, int64(i)%in
			k := r/128*cb + j/128
			scale := math.Float32frombits(binary.LittleEndian.Uint32(scales[4*k:]))
			if scale != blockMax[k]/448 {
				t.Fatalf("%s block %d: scale %g, want amax %g / 448", ts.name, k, scale, blockMax[k])
			}
			if got, want := q[i], f32ToE4M3(w/scale); got != want { // f32ToE4M3: TestE4M3MatchesReference
				t.Fatalf("%s[%d]: %#x, want e4m3(%g / %g) = %#x", ts.name, i, got, w, scale, want)
			}
			if float32(math.Abs(float64(w))) == blockMax[k] && q[i]&0x7f != 0x7e {
				t.Fatalf("%s[%d]: the block's amax is stored as %#x, not +-448", ts.name, i, q[i])
			}
		}
		checked++
	}
	if want := 8 + 5 + 3*c.MoE.Experts + 3; checked != want { // dense layer, MoE layer
		t.Errorf("%d fp8 tensors checked, want %d", checked, want)
	}
}

// TestDeepSeekDeterministic pins the bytes of the DeepSeek test model.
func TestDeepSeekDeterministic(t *testing.T) {
	c := deepseekTestConfig()
	for steps, want := range goldenDeepSeek {
		files, err := StreamCheckpointFiles(c, steps)
		if err != nil {
			t.Fatal(err)
		}
		if got := filesDigest(files); got != want {
			t.Errorf("step %d: digest %s, want %s", steps, got, want)
		}
	}
}

// TestDeepSeekChanges counts what a step changes in the stored bytes of a DeepSeek model at
// lr 3e-6: few fp8 weights (3 mantissa bits: an RL step rarely crosses a rounding boundary),
// nearly every scale (amax/448 of fp32 masters), no router bias, bf16 tensors as usual.
func TestDeepSeekChanges(t *testing.T) {
	c := deepseekTestConfig()
	m := steppedModel(t, c, 0)
	before := mustCheckpoint(t, m)
	m.Step()
	after := mustCheckpoint(t, m)
	a, b := before["model.safetensors"], after["model.safetensors"]
	ha, err := delta.ParseHeader(a, int64(len(a)))
	if err != nil {
		t.Fatal(err)
	}
	hb, err := delta.ParseHeader(b, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	var changed, total [3]int64 // fp8 weights, scales, router biases (elements)
	for i, ta := range ha.Tensors {
		tb := hb.Tensors[i]
		x, y := a[ha.DataStart()+ta.Begin:ha.DataStart()+ta.End], b[hb.DataStart()+tb.Begin:hb.DataStart()+tb.End]
		var k int
		switch {
		case ta.DType == delta.DTypeF8E4M3:
			k = 0
		case strings.HasSuffix(ta.Name, "_scale_inv"):
			k = 1
		case strings.HasSuffix(ta.Name, "e_score_correction_bias"):
			k = 2
		default:
			continue
		}
		size := ta.DType.Size()
		for j := 0; j < len(x); j += size {
			total[k]++
			if string(x[j:j+size]) != string(y[j:j+size]) {
				changed[k]++
			}
		}
	}
	t.Logf("changed: fp8 weights %d of %d (%.3f%%), scales %d of %d, router biases %d of %d",
		changed[0], total[0], 100*float64(changed[0])/float64(total[0]), changed[1], total[1], changed[2], total[2])
	if f := float64(changed[0]) / float64(total[0]); f <= 0 || f > 0.01 {
		t.Errorf("fp8 weights: %.3f%% changed, want above 0 and at most 1%%", 100*f)
	}
	if changed[1] < total[1]*9/10 {
		t.Errorf("scales: %d of %d changed, want nearly all", changed[1], total[1])
	}
	if changed[2] != 0 || total[2] == 0 {
		t.Errorf("router biases: %d of %d changed, want none of some", changed[2], total[2])
	}
}

// TestWriterSplitsWideElements: a write buffer's edge that falls inside a float32 element
// (after a tensor of odd byte size, or 2 bytes past a 4-byte boundary as here) is cut right:
// the element is made aside and its bytes land on both sides of the edge.
func TestWriterSplitsWideElements(t *testing.T) {
	spec := func(name string, d dtype, n int64) tensorSpec {
		return tensorSpec{name: name, shape: []int64{n}, numel: n, rowLen: n, dtype: d, expert: -1}
	}
	lay := &layout{tensors: []tensorSpec{spec("a", dtBF16, 2_000_000), spec("b", dtF32, 1000), spec("c", dtF8E4M3, 3), spec("d", dtF32, 5)}, files: [][]int{{0, 1, 2, 3}}}
	h := int64(len(safetensorsHeader(lay, lay.files[0])))
	n := (writeBufBytes - 2 - h) / 2 // "b" starts 2 bytes before the first buffer's end
	lay.tensors[0] = spec("a", dtBF16, n)
	if int64(len(safetensorsHeader(lay, lay.files[0]))) != h {
		t.Fatal("header length changed")
	}
	elem := func(ti int, e int64) []byte {
		v := uint32(e)*2654435761 + uint32(ti)*97
		return binary.LittleEndian.AppendUint32(nil, v)[:lay.tensors[ti].dtype.size()]
	}
	want := safetensorsHeader(lay, lay.files[0])
	for ti := range lay.tensors {
		for e := range lay.tensors[ti].numel {
			want = append(want, elem(ti, e)...)
		}
	}
	src := func(_ *scratch, ti int, lo, hi int64, dst []byte) {
		size := lay.tensors[ti].dtype.size()
		if int64(len(dst)) != size*(hi-lo) {
			panic(fmt.Sprintf("tensor %d [%d, %d): %d bytes of room", ti, lo, hi, len(dst)))
		}
		for e := lo; e < hi; e++ {
			copy(dst[size*(e-lo):], elem(ti, e))
		}
	}
	for _, workers := range []int{1, 3} {
		rec := &recordingWriter{}
		if _, err := writeSafetensors(rec, workers, lay, lay.files[0], src); err != nil {
			t.Fatal(err)
		}
		if rec.sizes[0] != writeBufBytes || !bytes.Equal(rec.buf.Bytes(), want) {
			t.Errorf("workers %d: file differs (%d bytes, want %d; writes %v)", workers, rec.buf.Len(), len(want), rec.sizes)
		}
	}
}
