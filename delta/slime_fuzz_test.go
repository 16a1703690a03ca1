package delta

import (
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// FuzzDecodeSlimeFrame: no panic; errors are ErrMalformed; accepted payloads re-encode to a
// frame that decodes to the same positions and bytes.
func FuzzDecodeSlimeFrame(f *testing.F) {
	enc, err := NewSlimeEncoder()
	if err != nil {
		f.Fatal(err)
	}
	good, _ := enc.Frame([]uint32{1, 5, 9}, []byte{7, 8, 9}, 10)
	f.Add(good, int64(10))
	f.Add(append(bytes.Clone(good), good...), int64(10))
	raw, _ := zstd.NewWriter(nil, zstd.WithSingleSegment(true))
	f.Add(raw.EncodeAll([]byte{1, 0, 0, 0, 9, 0, 0, 0, 1}, nil), int64(10))
	f.Add([]byte("garbage"), int64(4))
	f.Fuzz(func(t *testing.T, frame []byte, tensorLen int64) {
		if tensorLen < 0 || tensorLen > 1<<20 {
			return
		}
		positions, newBytes, err := DecodeSlimeFrame(frame, tensorLen)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		again, err := enc.Frame(positions, newBytes, tensorLen)
		if err != nil {
			t.Fatalf("accepted payload does not re-encode: %v", err)
		}
		p2, b2, err := DecodeSlimeFrame(again, tensorLen)
		if err != nil || len(p2) != len(positions) || !bytes.Equal(b2, newBytes) {
			t.Fatalf("re-encoded frame decodes differently: %v", err)
		}
	})
}

// FuzzParseSlimeIndex: no panic; errors wrap a sentinel; accepted indexes re-encode to an
// index that parses the same.
func FuzzParseSlimeIndex(f *testing.F) {
	good, _ := EncodeSlimeIndex(43, map[string]string{"a": "model-00000-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"})
	empty, _ := EncodeSlimeIndex(1, nil)
	f.Add(good)
	f.Add(empty)
	f.Add([]byte(`{"metadata": {}, "weight_map": {}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := ParseSlimeIndex(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		again, err := EncodeSlimeIndex(idx.Version, idx.WeightMap)
		if err != nil {
			t.Fatalf("accepted index does not re-encode: %v", err)
		}
		idx2, err := ParseSlimeIndex(again)
		if err != nil || idx2.Version != idx.Version || len(idx2.WeightMap) != len(idx.WeightMap) {
			t.Fatalf("re-encoded index parses differently: %v", err)
		}
	})
}

// FuzzOpenSlimeShard: no panic, errors wrap ErrMalformed.
func FuzzOpenSlimeShard(f *testing.F) {
	files := map[string][]byte{}
	hdr, _ := EncodeHeader(map[string]string{"a": SlimeChecksum(nil)}, []Tensor{{Name: "a", DType: DTypeU8, Shape: []int64{2}}})
	files["x"] = append(hdr, 1, 2)
	f.Add(files["x"])
	f.Fuzz(func(t *testing.T, shard []byte) {
		s, err := OpenSlimeShard(bytes.NewReader(shard), int64(len(shard)))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		for _, tt := range s.Header.Tensors {
			if _, err := s.Frame(tt.Name); err != nil {
				t.Fatal(err)
			}
		}
	})
}
