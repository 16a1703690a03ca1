package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os/exec"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gen"
)

// decodeSlimeGaps is the receiver's inverse of appendSlimeGaps (idx = cumsum(gap + 1) - 1):
// the reference the encoder is checked against.
func decodeSlimeGaps(b []byte, width int) []uint64 {
	var out []uint64
	next := uint64(0)
	for len(b) >= width {
		var gap uint64
		if width == 2 {
			gap = uint64(binary.LittleEndian.Uint16(b))
		} else {
			gap = uint64(binary.LittleEndian.Uint32(b))
		}
		b = b[width:]
		idx := next + gap
		out = append(out, idx)
		next = idx + 1
	}
	return out
}

func TestAppendSlimeGaps(t *testing.T) {
	tests := []struct {
		name    string
		indices []uint64
		want    []byte
		width   int
	}{
		{"first index is the first gap", []uint64{3}, []byte{3, 0}, 2},
		{"adjacent elements have gap 0", []uint64{0, 1, 2}, []byte{0, 0, 0, 0, 0, 0}, 2},
		{"u16 little-endian", []uint64{0, 0x0102 + 1}, []byte{0, 0, 0x02, 0x01}, 2},
		{"largest u16 gap", []uint64{65535}, []byte{0xff, 0xff}, 2},
		{"u32 fallback for the whole tensor", []uint64{1, 65537 + 2}, []byte{1, 0, 0, 0, 0x01, 0, 0x01, 0}, 4},
		{"empty", nil, nil, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := appendSlimeGaps(nil, tc.indices)
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("appendSlimeGaps(%v) = %x, want %x", tc.indices, got, tc.want)
			}
			back := decodeSlimeGaps(got, tc.width)
			if len(back) != len(tc.indices) {
				t.Fatalf("decoded %v, want %v", back, tc.indices)
			}
			for i := range back {
				if back[i] != tc.indices[i] {
					t.Fatalf("decoded %v, want %v", back, tc.indices)
				}
			}
		})
	}
}

func FuzzAppendSlimeGaps(f *testing.F) {
	f.Add([]byte{1, 2, 3})
	f.Add([]byte{0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, steps []byte) {
		// Ascending indices from arbitrary step bytes (steps of 0..2^24).
		var idx []uint64
		next := uint64(0)
		for i := 0; i+3 <= len(steps); i += 3 {
			next += uint64(steps[i]) | uint64(steps[i+1])<<8 | uint64(steps[i+2])<<16
			idx = append(idx, next)
			next++
		}
		b := appendSlimeGaps(nil, idx)
		if len(idx) == 0 {
			if len(b) != 0 {
				t.Fatalf("no indices gave %d bytes", len(b))
			}
			return
		}
		width := len(b) / len(idx)
		if width != 2 && width != 4 || len(b)%len(idx) != 0 {
			t.Fatalf("%d indices gave %d bytes", len(idx), len(b))
		}
		back := decodeSlimeGaps(b, width)
		for i := range idx {
			if back[i] != idx[i] {
				t.Fatalf("index %d: decoded %d, want %d", i, back[i], idx[i])
			}
		}
	})
}

func TestPositionBoundBits(t *testing.T) {
	tests := []struct {
		changed, total int64
		want           float64
	}{
		{1, 2, 2},          // H(1/2) = 1 bit, / (1/2)
		{1, 4, 3.2451},     // H(1/4) = 0.811278 bits, / (1/4)
		{25, 1000, 6.7464}, // p = 2.5%: H = 0.168661 bits
		{0, 10, 0},
		{10, 10, 0},
		{5, 0, 0},
	}
	for _, tc := range tests {
		got := positionBoundBits(tc.changed, tc.total)
		if math.Abs(got-tc.want) > 1e-3 {
			t.Errorf("positionBoundBits(%d, %d) = %.5f, want %.4f", tc.changed, tc.total, got, tc.want)
		}
	}
}

func TestTRLIndexWidth(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want int
	}{{1, 4}, {1<<31 - 1, 4}, {1 << 31, 8}} {
		if got := trlIndexWidth(tc.n); got != tc.want {
			t.Errorf("trlIndexWidth(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// genFiles is the checkpoint of the generator's preset after steps steps, file by file.
func genFiles(t *testing.T, preset string, lr float64, steps int) map[string][]byte {
	t.Helper()
	cfg, err := gen.Preset(preset, lr, 1)
	if err != nil {
		t.Fatal(err)
	}
	files, err := gen.StreamCheckpointFiles(cfg, steps)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestMeasureChanges checks the counts against the reference diff on two real generator
// versions, and the baselines' byte counts against their definitions.
func TestMeasureChanges(t *testing.T) {
	prev, cur := genFiles(t, "small", 3e-6, 0), genFiles(t, "small", 3e-6, 1)
	enc, err := newSlimeEncoder()
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	got, err := measureChanges(prev, cur, enc)
	if err != nil {
		t.Fatal(err)
	}

	// The reference: ReferenceDiff over every tensor, and the slime payload rebuilt from it.
	p, c := prev["model.safetensors"], cur["model.safetensors"]
	hp, err := delta.ReadHeader(bytes.NewReader(p), int64(len(p)))
	if err != nil {
		t.Fatal(err)
	}
	var changed, total int64
	var bucket slimeBucket
	for _, tn := range hp.Tensors {
		var ch delta.Changes
		lo, hi := hp.DataStart()+tn.Begin, hp.DataStart()+tn.End
		if err := delta.ReferenceDiff(p[lo:hi], c[lo:hi], 2, &ch); err != nil {
			t.Fatal(err)
		}
		changed += int64(len(ch.Index))
		total += tn.Elements()
		if len(ch.Index) > 0 {
			idx := make([]uint64, len(ch.Index))
			for i, v := range ch.Index {
				idx[i] = uint64(v)
			}
			bucket.add(idx, ch.Values)
		}
	}
	if changed == 0 {
		t.Fatal("the generator changed nothing: the test needs changes")
	}
	if got.Changed != changed || got.Total != total {
		t.Fatalf("changed %d of %d, want %d of %d", got.Changed, got.Total, changed, total)
	}
	if got.TRLBytes != 6*changed {
		t.Errorf("TRL bytes %d, want 6 per changed bf16 element (%d)", got.TRLBytes, 6*changed)
	}
	if got.SlimeRawBytes != int64(bucket.size()) {
		t.Errorf("slime raw bytes %d, want %d", got.SlimeRawBytes, bucket.size())
	}
	frame := enc.EncodeAll(bucket.bytes(), nil)
	if got.SlimeZstdBytes != int64(len(frame)) {
		t.Errorf("slime zstd bytes %d, want %d", got.SlimeZstdBytes, len(frame))
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	plain, err := dec.DecodeAll(frame, nil)
	if err != nil || !bytes.Equal(plain, bucket.bytes()) {
		t.Fatalf("the zstd frame does not decode to the payload: %v", err)
	}
}

func TestMeasureChangesRefusesOtherLayouts(t *testing.T) {
	a, b := genFiles(t, "tiny", 3e-6, 0), genFiles(t, "small", 3e-6, 1)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	tests := []struct {
		name      string
		prev, cur map[string][]byte
	}{
		{"different shapes", a, b},
		{"missing file", map[string][]byte{}, a},
		{"no safetensors", map[string][]byte{"x.json": {1}}, map[string][]byte{"x.json": {2}}},
		{"truncated file", map[string][]byte{"model.safetensors": a["model.safetensors"][:100]}, a},
	}
	for _, tc := range tests {
		if _, err := measureChanges(tc.prev, tc.cur, enc); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// TestSlimeEncoderMatchesZstdLevel1 checks the stand-in for libzstd's level 1 against the zstd
// command on a real slime payload: within 3% of its size.
func TestSlimeEncoderMatchesZstdLevel1(t *testing.T) {
	zstdCmd, err := exec.LookPath("zstd")
	if err != nil {
		t.Skip("no zstd command")
	}
	prev, cur := genFiles(t, "medium", 1e-6, 0), genFiles(t, "medium", 1e-6, 1)
	payload := slimePayload(t, prev["model.safetensors"], cur["model.safetensors"])
	enc, err := newSlimeEncoder()
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	ours := len(enc.EncodeAll(payload, nil))
	cmd := exec.Command(zstdCmd, "-1", "-c", "-q")
	cmd.Stdin = bytes.NewReader(payload)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if ratio := float64(ours) / float64(len(out)); ratio < 0.97 || ratio > 1.03 {
		t.Fatalf("%d bytes of payload: ours %d, zstd -1 %d (%.3fx)", len(payload), ours, len(out), ratio)
	}
	if len(out) >= len(payload) {
		t.Fatalf("zstd -1 did not compress the payload (%d -> %d): the test input is wrong", len(payload), len(out))
	}
}

// slimePayload is the slime bucket of one safetensors file, built from the reference diff.
func slimePayload(t *testing.T, p, c []byte) []byte {
	t.Helper()
	hp, err := delta.ReadHeader(bytes.NewReader(p), int64(len(p)))
	if err != nil {
		t.Fatal(err)
	}
	var bucket slimeBucket
	for _, tn := range hp.Tensors {
		var ch delta.Changes
		lo, hi := hp.DataStart()+tn.Begin, hp.DataStart()+tn.End
		if err := delta.ReferenceDiff(p[lo:hi], c[lo:hi], 2, &ch); err != nil {
			t.Fatal(err)
		}
		if len(ch.Index) > 0 {
			idx := make([]uint64, len(ch.Index))
			for i, v := range ch.Index {
				idx[i] = uint64(v)
			}
			bucket.add(idx, ch.Values)
		}
	}
	return bucket.bytes()
}
