package delta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// rawFile builds a safetensors file from a literal JSON header and dataLen zero bytes of data.
func rawSafetensors(js string, dataLen int) []byte {
	out := make([]byte, 8, 8+len(js)+dataLen)
	binary.LittleEndian.PutUint64(out, uint64(len(js)))
	out = append(out, js...)
	return append(out, make([]byte, dataLen)...)
}

func TestDTypeSizes(t *testing.T) {
	tests := []struct {
		d     DType
		size  int
		float bool
	}{
		{"BOOL", 1, false}, {"U8", 1, false}, {"I8", 1, false}, {"U16", 2, false},
		{"I16", 2, false}, {"U32", 4, false}, {"I32", 4, false}, {"U64", 8, false},
		{"I64", 8, false}, {"F8_E4M3", 1, true}, {"F8_E5M2", 1, true}, {"BF16", 2, true},
		{"F16", 2, true}, {"F32", 4, true}, {"F64", 8, true}, {"F128", 0, false}, {"bf16", 0, false},
	}
	for _, tt := range tests {
		if got := tt.d.Size(); got != tt.size {
			t.Errorf("%s.Size() = %d, want %d", tt.d, got, tt.size)
		}
		if got := tt.d.IsFloat(); got != tt.float {
			t.Errorf("%s.IsFloat() = %v, want %v", tt.d, got, tt.float)
		}
	}
}

func TestParseHeaderValid(t *testing.T) {
	tests := []struct {
		name    string
		js      string
		dataLen int
		want    []Tensor
		meta    map[string]string
	}{
		{"empty", `{}`, 0, nil, nil},
		{"padded", `{}      `, 0, nil, nil},
		{"metadata only", `{"__metadata__":{"format":"pt"}}`, 0, nil, map[string]string{"format": "pt"}},
		{"null metadata", `{"__metadata__":null}`, 0, nil, nil},
		{"one tensor", `{"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`, 12,
			[]Tensor{{Name: "a", DType: "BF16", Shape: []int64{2, 3}, Begin: 0, End: 12}}, nil},
		{"scalar", `{"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}`, 8,
			[]Tensor{{Name: "s", DType: "F64", Shape: []int64{}, Begin: 0, End: 8}}, nil},
		{"sorted by offset, field order free", `{"b":{"data_offsets":[4,6],"shape":[1],"dtype":"I16"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 6,
			[]Tensor{
				{Name: "a", DType: "F32", Shape: []int64{1}, Begin: 0, End: 4},
				{Name: "b", DType: "I16", Shape: []int64{1}, Begin: 4, End: 6},
			}, nil},
		{"zero-length tensors share an offset", `{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},"e":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, 4,
			[]Tensor{
				{Name: "e", DType: "U8", Shape: []int64{0}, Begin: 0, End: 0},
				{Name: "x", DType: "U8", Shape: []int64{4}, Begin: 0, End: 4},
				{Name: "z", DType: "F32", Shape: []int64{0, 5}, Begin: 4, End: 4},
			}, nil},
		{"zero dim with huge other dims", `{"z":{"dtype":"F32","shape":[0,9223372036854775807,9223372036854775807],"data_offsets":[0,0]}}`, 0,
			[]Tensor{{Name: "z", DType: "F32", Shape: []int64{0, 1<<63 - 1, 1<<63 - 1}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := rawSafetensors(tt.js, tt.dataLen)
			h, err := ParseHeader(file, int64(len(file)))
			if err != nil {
				t.Fatalf("ParseHeader: %v", err)
			}
			if !reflect.DeepEqual(h.Tensors, tt.want) {
				t.Errorf("tensors = %+v, want %+v", h.Tensors, tt.want)
			}
			if !reflect.DeepEqual(h.Metadata, tt.meta) {
				t.Errorf("metadata = %v, want %v", h.Metadata, tt.meta)
			}
			if h.HeaderLen != int64(len(tt.js)) || h.DataStart() != int64(8+len(tt.js)) {
				t.Errorf("HeaderLen %d DataStart %d, want %d", h.HeaderLen, h.DataStart(), len(tt.js))
			}
			h2, err := ReadHeader(bytes.NewReader(file), int64(len(file)))
			if err != nil || !reflect.DeepEqual(h2, h) {
				t.Errorf("ReadHeader = %+v, %v; want %+v", h2, err, h)
			}
		})
	}
}

func TestParseHeaderErrors(t *testing.T) {
	const f4 = `"dtype":"F32","shape":[1]`
	tests := []struct {
		name    string
		file    []byte
		wantMsg string
	}{
		{"shorter than 8 bytes", []byte{1, 0, 0}, "shorter than the 8-byte"},
		{"header length past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), "runs past the end"},
		{"header length over limit", append(binary.LittleEndian.AppendUint64(nil, MaxHeaderLen+1), "{}"...), "exceeds the limit"},
		{"header length huge", append(binary.LittleEndian.AppendUint64(nil, 1<<63+5), "{}"...), "exceeds the limit"},
		{"empty header", rawSafetensors(``, 0), "does not start with '{'"},
		{"not an object", rawSafetensors(`[]`, 0), "does not start with '{'"},
		{"leading space", rawSafetensors(` {}`, 0), "does not start with '{'"},
		{"bad json", rawSafetensors(`{"a":}`, 0), "malformed"},
		{"truncated json", rawSafetensors(`{"a":{"dtype":"F32"`, 0), "tensor \"a\""},
		{"trailing garbage", rawSafetensors(`{}  x`, 0), "after the JSON object"},
		{"invalid utf-8", rawSafetensors("{\"\xff\":{}}", 0), "not valid UTF-8"},
		{"duplicate tensor", rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,4]},"a":{`+f4+`,"data_offsets":[4,8]}}`, 8), `duplicate header key "a"`},
		{"duplicate metadata", rawSafetensors(`{"__metadata__":{},"__metadata__":{}}`, 0), "duplicate header key"},
		{"duplicate metadata key", rawSafetensors(`{"__metadata__":{"k":"1","k":"2"}}`, 0), `duplicate key "k"`},
		{"metadata not strings", rawSafetensors(`{"__metadata__":{"k":1}}`, 0), `value of "k"`},
		{"metadata not object", rawSafetensors(`{"__metadata__":"x"}`, 0), "want an object"},
		{"unknown dtype", rawSafetensors(`{"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`, 16), `unknown dtype "F128"`},
		{"missing dtype", rawSafetensors(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, 4), "missing dtype"},
		{"missing shape", rawSafetensors(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, 4), "missing shape"},
		{"missing offsets", rawSafetensors(`{"a":{`+f4+`}}`, 4), "missing data_offsets"},
		{"unknown field", rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,4],"x":1}}`, 4), `unknown field "x"`},
		{"duplicate field", rawSafetensors(`{"a":{`+f4+`,"shape":[1],"data_offsets":[0,4]}}`, 4), `duplicate field "shape"`},
		{"negative dim", rawSafetensors(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "negative"},
		{"fractional dim", rawSafetensors(`{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}`, 4), "not an integer"},
		{"dim not a number", rawSafetensors(`{"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, 4), "not a number"},
		{"shape overflow", rawSafetensors(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), "fit in int64"},
		{"bytes overflow", rawSafetensors(`{"a":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}}`, 4), "overflows int64"},
		{"offset too big", rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,99999999999999999999]}}`, 4), "int64 range"},
		{"three offsets", rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,4,8]}}`, 4), "has 3 numbers"},
		{"end before begin", rawSafetensors(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, 4), "end before they begin"},
		{"size mismatch", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, 4), "hold 4 bytes, but shape [2] of F32 needs 2 elements x 4 bytes = 8"},
		{"first not at zero", rawSafetensors(`{"a":{`+f4+`,"data_offsets":[4,8]}}`, 8), `first tensor "a" starts at 4, not 0`},
		{"gap", rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,4]},"b":{`+f4+`,"data_offsets":[8,12]}}`, 12), `tensor "b" starts at 8 but previous tensor "a" ends at 4`},
		{"overlap", rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{`+f4+`,"data_offsets":[4,8]}}`, 8), `tensor "b" at [4, 8] overlaps previous tensor "a" ending at 8`},
		{"data shorter than tensors", rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,4]}}`, 2), "data section holds 2 bytes"},
		{"data longer than tensors", rawSafetensors(`{"a":{`+f4+`,"data_offsets":[0,4]}}`, 6), "tensors end at data offset 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHeader(tt.file, int64(len(tt.file)))
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseHeader = %+v, %v; want ErrMalformed", h, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not say %q", err, tt.wantMsg)
			}
			if _, err := ReadHeader(bytes.NewReader(tt.file), int64(len(tt.file))); !errors.Is(err, ErrMalformed) {
				t.Errorf("ReadHeader error = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestParseHeaderShortPrefix(t *testing.T) {
	file := rawSafetensors(`{}      `, 0)
	if _, err := ParseHeader(file[:10], int64(len(file))); !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
}

func TestEncodeHeaderRoundTrip(t *testing.T) {
	tensors := []Tensor{
		{Name: "model.embed_tokens.weight", DType: DTypeBF16, Shape: []int64{7, 3}},
		{Name: "b<&>\"\\\n", DType: DTypeF32, Shape: []int64{}},
		{Name: "empty", DType: DTypeI64, Shape: []int64{0, 2}},
		{Name: "ünïcode", DType: DTypeF8E4M3, Shape: []int64{5}},
	}
	meta := map[string]string{"format": "pt", "a": "1", "z": "</x>"}
	hdr, err := EncodeHeader(meta, tensors)
	if err != nil {
		t.Fatal(err)
	}
	if len(hdr)%8 != 0 {
		t.Errorf("header of %d bytes is not 8-aligned", len(hdr))
	}
	wantOffsets := [][2]int64{{0, 42}, {42, 46}, {46, 46}, {46, 51}}
	for i, tt := range tensors {
		if got := [2]int64{tt.Begin, tt.End}; got != wantOffsets[i] {
			t.Errorf("%s offsets %v, want %v", tt.Name, got, wantOffsets[i])
		}
	}
	js := string(hdr[8:])
	if !strings.HasPrefix(js, `{"__metadata__":{"a":"1","format":"pt","z":"</x>"},"model.embed_tokens.weight":{"dtype":"BF16","shape":[7,3],"data_offsets":[0,42]},`) {
		t.Errorf("unexpected header JSON %s", js)
	}
	file := append(hdr, make([]byte, 51)...)
	h, err := ParseHeader(file, int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.Metadata, meta) {
		t.Errorf("metadata %v, want %v", h.Metadata, meta)
	}
	// Sorted by offset: the zero-length tensor at 46 comes before the one spanning 46..51.
	want := []Tensor{tensors[0], tensors[1], tensors[2], tensors[3]}
	if !reflect.DeepEqual(h.Tensors, want) {
		t.Errorf("tensors %+v, want %+v", h.Tensors, want)
	}
	again, err := EncodeHeader(meta, append([]Tensor(nil), tensors...))
	if err != nil || !bytes.Equal(again, hdr) {
		t.Errorf("EncodeHeader not deterministic")
	}
}

func TestEncodeHeaderErrors(t *testing.T) {
	tests := []struct {
		name    string
		meta    map[string]string
		tensors []Tensor
	}{
		{"unknown dtype", nil, []Tensor{{Name: "a", DType: "X", Shape: []int64{1}}}},
		{"negative dim", nil, []Tensor{{Name: "a", DType: "U8", Shape: []int64{-2}}}},
		{"overflow", nil, []Tensor{{Name: "a", DType: "U16", Shape: []int64{1 << 62}}}},
		{"duplicate", nil, []Tensor{{Name: "a", DType: "U8"}, {Name: "a", DType: "U8"}}},
		{"reserved name", nil, []Tensor{{Name: "__metadata__", DType: "U8"}}},
		{"bad utf-8 name", nil, []Tensor{{Name: "\xff", DType: "U8"}}},
		{"bad utf-8 metadata", map[string]string{"k": "\xfe"}, nil},
		{"data beyond int64", nil, []Tensor{{Name: "a", DType: "U8", Shape: []int64{1<<63 - 1}}, {Name: "b", DType: "U8", Shape: []int64{1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := EncodeHeader(tt.meta, tt.tensors); err == nil {
				t.Fatal("EncodeHeader succeeded")
			}
		})
	}
}

func TestEncodeHeaderEmptyMetadata(t *testing.T) {
	hdr, err := EncodeHeader(map[string]string{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(hdr[8:]); got != `{"__metadata__":{}}     ` {
		t.Errorf("header %q", got)
	}
	if n := binary.LittleEndian.Uint64(hdr); n != 24 {
		t.Errorf("length %d, want 24", n)
	}
}
