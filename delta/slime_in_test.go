package delta

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestDecodeSlimeChangesXOR: an xor frame decodes to the positions of its nonzero bytes and
// those bytes; a frame of another length than the tensor, or two frames, are refused.
func TestDecodeSlimeChangesXOR(t *testing.T) {
	enc, _ := zstd.NewWriter(nil, zstd.WithSingleSegment(true))
	diff := make([]byte, 3*slimeXORChunk+5) // spans several read chunks
	diff[0], diff[slimeXORChunk], diff[len(diff)-1] = 1, 0x80, 7
	frame := enc.EncodeAll(diff, nil)
	pos, vals, err := DecodeSlimeChanges(frame, int64(len(diff)), SlimeXOR)
	if err != nil || len(pos) != 3 || pos[0] != 0 || pos[1] != slimeXORChunk || int(pos[2]) != len(diff)-1 || !bytes.Equal(vals, []byte{1, 0x80, 7}) {
		t.Fatalf("decoded %v %v, %v", pos, vals, err)
	}
	for _, bad := range []struct {
		frame []byte
		n     int64
		want  string
	}{
		{frame, int64(len(diff)) - 1, "the tensor has"},
		{append(bytes.Clone(frame), frame...), int64(len(diff)), "follow the zstd frame"},
		{frame[:len(frame)-2], int64(len(diff)), "truncated"},
	} {
		if _, _, err := DecodeSlimeChanges(bad.frame, bad.n, SlimeXOR); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%d bytes for %d: %v; want ErrMalformed with %q", len(bad.frame), bad.n, err, bad.want)
		}
	}
	if _, _, err := DecodeSlimeChanges(frame, int64(len(diff)), "bitflip"); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("unknown encoding: %v", err)
	}
	idx := []byte(`{"metadata": {"version": "000002", "base_version": "000001", "delta_encoding": "xor", "compression_format": "zstd", "checksum_format": "xxh3-128"}, "weight_map": {}}`)
	if got, err := ParseSlimeIndexIn(idx); err != nil || got.Encoding != SlimeXOR {
		t.Fatalf("ParseSlimeIndexIn: %+v %v", got, err)
	}
	if _, err := ParseSlimeIndex(idx); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("ParseSlimeIndex takes xor (what weightfs renders is overwrite only): %v", err)
	}
}

// FuzzDecodeSlimeChanges: no panic; errors wrap a sentinel; an accepted xor frame's positions
// ascend inside the tensor and carry nonzero bytes.
func FuzzDecodeSlimeChanges(f *testing.F) {
	enc, _ := zstd.NewWriter(nil, zstd.WithSingleSegment(true))
	f.Add(enc.EncodeAll([]byte{0, 3, 0, 0, 9}, nil), int64(5), true)
	f.Add(enc.EncodeAll([]byte{1, 0, 0, 0, 2, 0, 0, 0, 9}, nil), int64(5), false)
	f.Add([]byte("garbage"), int64(4), true)
	f.Fuzz(func(t *testing.T, frame []byte, tensorLen int64, xor bool) {
		if tensorLen < 0 || tensorLen > 1<<20 {
			return
		}
		encoding := SlimeOverwrite
		if xor {
			encoding = SlimeXOR
		}
		pos, vals, err := DecodeSlimeChanges(frame, tensorLen, encoding)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if len(pos) != len(vals) {
			t.Fatalf("%d positions, %d bytes", len(pos), len(vals))
		}
		for i, p := range pos {
			if int64(p) >= tensorLen || i > 0 && p <= pos[i-1] || xor && vals[i] == 0 {
				t.Fatalf("position %d (index %d, byte %d) in a tensor of %d bytes", p, i, vals[i], tensorLen)
			}
		}
	})
}
