package gen

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"testing"
)

// goldenTiny pins the bytes of the tiny preset (lr 3e-6, seed 1) at versions 1 and 4. A change
// here means every checkpoint the project's tests and benchmarks generate has changed: only
// update it on purpose.
var goldenTiny = map[int]string{
	0: "a45b7a0bed3874f04fb186a04c96bb1335372982f797d55a8161a844fb14a672",
	3: "a761068e4735d3709c3f4286ec3ef845bf7c1727c54342fdd791a9cc0d966a27",
}

func TestDeterministicBytes(t *testing.T) {
	c := mustPreset(t, "small", 3e-6, 1)
	c.Shards = 2
	digests := map[int][]string{}
	for _, workers := range []int{1, 2, 5} {
		c.Workers = workers
		m, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		for step := 0; step <= 3; step++ {
			if step > 0 {
				m.Step()
			}
			files, err := m.CheckpointFiles()
			if err != nil {
				t.Fatal(err)
			}
			digests[step] = append(digests[step], filesDigest(files))
		}
	}
	for step, ds := range digests {
		if ds[0] != ds[1] || ds[0] != ds[2] {
			t.Errorf("step %d: digests differ with the number of workers: %v", step, ds)
		}
	}
	if digests[0][0] == digests[1][0] {
		t.Error("a step changed nothing")
	}
}

func TestGoldenDigests(t *testing.T) {
	c := mustPreset(t, "tiny", 3e-6, 1)
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	for step := 0; step <= 3; step++ {
		if step > 0 {
			m.Step()
		}
		want, ok := goldenTiny[step]
		if !ok {
			continue
		}
		files, err := m.CheckpointFiles()
		if err != nil {
			t.Fatal(err)
		}
		if got := filesDigest(files); got != want {
			t.Errorf("step %d: digest %s, want %s", step, got, want)
		}
	}
}

func TestSeedsDiffer(t *testing.T) {
	a, _ := New(mustPreset(t, "tiny", 3e-6, 1))
	b, _ := New(mustPreset(t, "tiny", 3e-6, 2))
	fa, _ := a.CheckpointFiles()
	fb, _ := b.CheckpointFiles()
	if bytes.Equal(fa["model.safetensors"], fb["model.safetensors"]) {
		t.Error("seeds 1 and 2 give the same weights")
	}
}

// TestFastStepMatchesReference compares the chunked parallel kernel with the element-by-element
// reference after a few steps: every element of the tiny preset, and a strided sample of the
// small one (the reference recomputes everything per element and is slow).
func TestFastStepMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		preset string
		stride int64
	}{{"tiny", 1}, {"small", 13}} {
		c := mustPreset(t, tc.preset, 3e-6, 11)
		c.Workers = 3
		const steps = 3
		m := steppedModel(t, c, steps)
		for ti := range m.lay.tensors {
			ts := &m.lay.tensors[ti]
			for i := int64(ti) % tc.stride; i < ts.numel; i += tc.stride {
				want := referenceTrajectory(c, ts, i, steps)
				if got := m.w[ti][i]; math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%s %s[%d]: fast %v (%#x), reference %v (%#x)", tc.preset, ts.name, i, got, math.Float32bits(got), want, math.Float32bits(want))
				}
			}
		}
	}
}

// TestWriterMatchesReference compares whole files from the buffered parallel writer with
// referenceSafetensors (encoding/json header, element by element data): with the reference
// kernel end to end on the tiny preset, and with the model's own master weights (so only the
// writer is under test) on sharded files and on a file of several write buffers.
func TestWriterMatchesReference(t *testing.T) {
	tests := []struct {
		name         string
		cfg          Config
		shards       int
		endToEndElem bool
	}{
		{"tiny end to end", mustPreset(t, "tiny", 1e-6, 4), 1, true},
		{"tiny end to end sharded", mustPreset(t, "tiny", 1e-6, 4), 3, true},
		{"small sharded", mustPreset(t, "small", 1e-6, 4), 3, false},
		{"several buffers", ConfigForParams(5_000_000, 3e-6, 4), 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.Shards = tc.shards
			m := steppedModel(t, c, 1)
			files := mustCheckpoint(t, m)
			elem := func(ti int, i int64) uint16 { return referenceBF16(m.w[ti][i]) }
			if tc.endToEndElem {
				elem = func(ti int, i int64) uint16 {
					return referenceBF16(referenceTrajectory(c, &m.lay.tensors[ti], i, 1))
				}
			}
			for k, name := range m.lay.fileNames() {
				want, err := referenceSafetensors(m.lay, m.lay.files[k], elem)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(files[name], want) {
					t.Errorf("%s differs from the reference (%d vs %d bytes)", name, len(files[name]), len(want))
				}
			}
		})
	}
}

// TestWritePattern checks that a safetensors file goes out in writeBufBytes pieces, only the
// last one shorter, as a trainer writes.
func TestWritePattern(t *testing.T) {
	c := ConfigForParams(5_000_000, 1e-6, 1) // ~10 MB: three writes
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingWriter{}
	n, err := writeSafetensors(rec, 2, m.lay, m.lay.files[0], m.source())
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(rec.buf.Len()) || n != 2*c.ParamCount()+int64(len(safetensorsHeader(m.lay, m.lay.files[0]))) {
		t.Fatalf("wrote %d bytes, recorded %d", n, rec.buf.Len())
	}
	for i, size := range rec.sizes {
		if size != writeBufBytes && i != len(rec.sizes)-1 {
			t.Errorf("write %d of %d is %d bytes", i, len(rec.sizes), size)
		}
	}
	if len(rec.sizes) < 2 {
		t.Errorf("only %d writes", len(rec.sizes))
	}
}

type recordingWriter struct {
	buf   bytes.Buffer
	sizes []int
}

func (r *recordingWriter) Write(p []byte) (int, error) {
	r.sizes = append(r.sizes, len(p))
	return r.buf.Write(p)
}

// failingWriter accepts limit bytes, then fails.
type failingWriter struct{ limit int }

var errDiskFull = fmt.Errorf("disk full")

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		n := f.limit
		f.limit = 0
		return n, errDiskFull
	}
	f.limit -= len(p)
	return len(p), nil
}

func TestWriteErrorStops(t *testing.T) {
	c := ConfigForParams(5_000_000, 1e-6, 1)
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	n, err := writeSafetensors(&failingWriter{limit: writeBufBytes + 10}, 2, m.lay, m.lay.files[0], m.source())
	if err != errDiskFull || n != writeBufBytes+10 {
		t.Errorf("got %d, %v; want %d, %v", n, err, writeBufBytes+10, errDiskFull)
	}
	var _ io.Writer = &failingWriter{}
}

func TestCheckpointHeaderLayout(t *testing.T) {
	m, err := New(mustPreset(t, "tiny", 1e-6, 1))
	if err != nil {
		t.Fatal(err)
	}
	files, err := m.CheckpointFiles()
	if err != nil {
		t.Fatal(err)
	}
	st := files["model.safetensors"]
	hlen := binary.LittleEndian.Uint64(st)
	header := string(st[8 : 8+hlen])
	const prefix = `{"__metadata__":{"format":"pt"},"lm_head.weight":{"dtype":"BF16","shape":[128,16],"data_offsets":[0,4096]},"model.embed_tokens.weight":{"dtype":"BF16","shape":[128,16],"data_offsets":[4096,8192]},"model.layers.0.input_layernorm.weight":{"dtype":"BF16","shape":[16],"data_offsets":[8192,8224]}`
	if len(header) < len(prefix) || header[:len(prefix)] != prefix {
		t.Errorf("header starts %.300s\nwant %s", header, prefix)
	}
	_, order, err := parseSafetensors(st)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] >= order[i] {
			t.Errorf("tensors not sorted by name: %s before %s", order[i-1], order[i])
		}
	}
	// Norm weights are 1.0 (bf16 0x3f80) at version 1.
	tensors := checkpointTensors(t, files)
	if norm := tensors["model.norm.weight"]; binary.LittleEndian.Uint16(norm) != 0x3f80 {
		t.Errorf("model.norm.weight[0] = %#x, want 0x3f80", binary.LittleEndian.Uint16(norm))
	}
}

// steppedModel is a model of c after steps training steps.
func steppedModel(t *testing.T, c Config, steps int) *Model {
	t.Helper()
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	for range steps {
		m.Step()
	}
	return m
}

// mustCheckpoint is m's checkpoint as files (name to bytes).
func mustCheckpoint(t *testing.T, m *Model) map[string][]byte {
	t.Helper()
	files, err := m.CheckpointFiles()
	if err != nil {
		t.Fatal(err)
	}
	return files
}
