package delta

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// FuzzParseHeader checks that no input makes ParseHeader panic or fail with anything but
// ErrMalformed, and that every accepted header re-encodes and re-parses to the same tensors.
func FuzzParseHeader(f *testing.F) {
	f4 := `"dtype":"F32","shape":[1]`
	seeds := [][]byte{
		rawSafetensors(`{}`, 0),
		rawSafetensors(`{"__metadata__":{"format":"pt"}}   `, 0),
		rawSafetensors(`{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`, 12),
		rawSafetensors(`{"b":{"data_offsets":[4,6],"shape":[1],"dtype":"I16"},"a":{`+f4+`,"data_offsets":[0,4]}}`, 6),
		rawSafetensors(`{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]}}`, 4),
		rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,4]},"a":{`+f4+`,"data_offsets":[4,8]}}`, 8),
		rawSafetensors(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4),
		rawSafetensors(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4),
		rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,4]},"b":{`+f4+`,"data_offsets":[8,12]}}`, 12),
		rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{`+f4+`,"data_offsets":[4,8]}}`, 8),
		rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,4]}}`, 2),
		rawSafetensors(`{"a":{"dtype":"X","shape":[1],"data_offsets":[0,4]}}`, 4),
		rawSafetensors(`{"__metadata__":{"k":1}}`, 0),
		append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...),
		append(binary.LittleEndian.AppendUint64(nil, MaxHeaderLen+1), "{}"...),
		{1, 2, 3},
	}
	if hdr, err := EncodeHeader(map[string]string{"format": "pt"}, []Tensor{{Name: "w", DType: DTypeBF16, Shape: []int64{3}}}); err == nil {
		seeds = append(seeds, append(hdr, 1, 2, 3, 4, 5, 6))
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		h, err := ParseHeader(file, int64(len(file)))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		tensors := append([]Tensor(nil), h.Tensors...)
		hdr, err := EncodeHeader(h.Metadata, tensors)
		if err != nil {
			t.Fatalf("re-encode of an accepted header: %v", err)
		}
		again := append(hdr, file[h.DataStart():]...)
		h2, err := ParseHeader(again, int64(len(again)))
		if err != nil {
			t.Fatalf("re-parse of re-encoded header: %v", err)
		}
		if !reflect.DeepEqual(h2.Tensors, h.Tensors) || !reflect.DeepEqual(h2.Metadata, h.Metadata) {
			t.Fatalf("round trip changed the header: %+v %v -> %+v %v", h.Tensors, h.Metadata, h2.Tensors, h2.Metadata)
		}
	})
}
