package delta

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// headersAgree parses file (a header and its data) with and without the fast scanner, for
// its own size and for the size its tensors imply, and fails unless both ways give the same
// Header or the same error. It reports whether the fast scanner itself took the header.
func headersAgree(t *testing.T, file []byte) (fastTook bool) {
	t.Helper()
	size := int64(len(file))
	hf, ef := parseHeader(file, size, true)
	hr, er := parseHeader(file, size, false)
	if (ef == nil) != (er == nil) || ef != nil && ef.Error() != er.Error() || !reflect.DeepEqual(hf, hr) {
		t.Fatalf("ParseHeader of %q:\nfast      %+v, %v\nreference %+v, %v", file, hf, ef, hr, er)
	}
	af, sf, ef := parseHeaderAnySize(file, true)
	ar, sr, er := parseHeaderAnySize(file, false)
	if (ef == nil) != (er == nil) || ef != nil && ef.Error() != er.Error() || sf != sr || !reflect.DeepEqual(af, ar) {
		t.Fatalf("ParseHeaderAnySize of %q:\nfast      %+v, %d, %v\nreference %+v, %d, %v", file, af, sf, ef, ar, sr, er)
	}
	// The size it implies is the one size ParseHeader accepts.
	if er == nil {
		if _, err := parseHeader(file[:ar.DataStart()], sr, false); err != nil {
			t.Fatalf("ParseHeaderAnySize of %q says size %d, which ParseHeader refuses: %v", file, sr, err)
		}
		if size != sr && hr != nil {
			t.Fatalf("ParseHeader of %q accepts size %d, ParseHeaderAnySize says %d", file, size, sr)
		}
	}
	if len(file) >= 8 {
		if n := binary.LittleEndian.Uint64(file); n <= uint64(len(file)-8) {
			var h Header
			fastTook = parseHeaderFast(file[8:8+n], &h)
		}
	}
	return fastTook
}

// randomHeader builds a header as writers do (EncodeHeader) from random names, dtypes,
// shapes and metadata, and returns it with its data section's length.
func randomHeader(rng *rand.Rand) ([]byte, int) {
	pieces := []string{"model", "layers", "mlp", "experts", "gate_proj", "up_proj", "down_proj", "weight",
		"bias", "é", "日本", "a\"b", "tab\t", "back\\slash", "<&>", "\u2028", "__metadata", "0", "17"}
	dtypes := []DType{DTypeBF16, DTypeF32, DTypeU8, DTypeI64, DTypeF8E4M3, DTypeBool, DTypeF16}
	var tensors []Tensor
	seen := map[string]bool{}
	for range rng.IntN(12) {
		var name []string
		for range 1 + rng.IntN(5) {
			name = append(name, pieces[rng.IntN(len(pieces))])
		}
		n := strings.Join(name, ".")
		if seen[n] {
			continue
		}
		seen[n] = true
		shape := make([]int64, rng.IntN(4))
		for i := range shape {
			shape[i] = int64(rng.IntN(5))
		}
		tensors = append(tensors, Tensor{Name: n, DType: dtypes[rng.IntN(len(dtypes))], Shape: shape})
	}
	var meta map[string]string
	switch rng.IntN(3) {
	case 1:
		meta = map[string]string{}
	case 2:
		meta = map[string]string{"format": "pt", pieces[rng.IntN(len(pieces))]: pieces[rng.IntN(len(pieces))]}
	}
	hdr, err := EncodeHeader(meta, tensors)
	if err != nil {
		panic(err)
	}
	var dataLen int
	if len(tensors) > 0 {
		dataLen = int(tensors[len(tensors)-1].End)
	}
	return hdr, dataLen
}

// mutate changes the JSON of a header (hdr: 8-byte length and JSON) in one of the ways a
// hand-written scanner may get wrong, and fixes the length.
func mutate(rng *rand.Rand, hdr []byte) []byte {
	js := []byte(string(hdr[8:]))
	alphabet := []string{"{", "}", "[", "]", ",", ":", `"`, `\`, "0", "1", "9", "-", "+", ".", "e", "E", " ", "\n",
		"\t", "null", "true", "x", "\xff", "\xc3", "é", `\u0041`, `"dtype"`, `"shape"`, `"data_offsets"`,
		`"__metadata__"`, "01", "-0", "1.0", "1e2", "123456789012345678", "1234567890123456789", "[0,0]", "[]", `"BF16"`}
	for range 1 + rng.IntN(3) {
		if len(js) == 0 {
			break
		}
		i := rng.IntN(len(js) + 1)
		switch rng.IntN(4) {
		case 0: // insert
			js = append(js[:i:i], append([]byte(alphabet[rng.IntN(len(alphabet))]), js[i:]...)...)
		case 1: // replace a byte
			if i < len(js) {
				js = append(js[:i:i], append([]byte(alphabet[rng.IntN(len(alphabet))]), js[i+1:]...)...)
			}
		case 2: // delete a run
			j := min(len(js), i+rng.IntN(4))
			js = append(js[:i:i], js[j:]...)
		case 3: // repeat a run (duplicate keys, fields, elements)
			j := min(len(js), i+rng.IntN(80))
			js = append(js[:j:j], append([]byte(string(js[i:j])), js[j:]...)...)
		}
	}
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(js))), js...)
}

// TestParseHeaderFastMatchesReference: the fast scanner and the token walk give the same
// header or the same error, on writers' headers and on thousands of mutations of them, and
// the fast scanner takes the writers' headers itself (else the fast path would be dead).
func TestParseHeaderFastMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 18))
	cases := []string{
		`{}`, ` {}`, `{} `, `{}x`, `{"__metadata__":null}`, `{"__metadata__":{}}`, `{"__metadata__":nul}`,
		`{"__metadata__":{"a":"b"},"__metadata__":{"a":"b"}}`, `{"__metadata__":{"a":"b","a":"c"}}`,
		`{"__metadata__":{"a":1}}`, `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},}`,
		`{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}`, `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,01]}}`,
		`{"a":{"dtype":"U8","shape":[123456789012345678],"data_offsets":[0,123456789012345678]}}`,
		`{"a":{"dtype":"U8","shape":[1234567890123456789],"data_offsets":[0,1234567890123456789]}}`,
		`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"dtype":"U8"}}`, `{"a":{"dtype":"U8","shape":[1]}}`,
		`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, `{"a":{"dtype":"X8","shape":[1],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}}`, `{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}}`,
		`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`,
		"{\"\xc3\xa9\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		"{\"\xc3\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
		`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}`,
		` { "a" : { "shape" : [ 1 ] , "dtype" : "U8" , "data_offsets" : [ 0 , 1 ] } }  `,
	}
	for _, js := range cases {
		for _, dataLen := range []int{0, 1, 2, 3} {
			headersAgree(t, rawSafetensors(js, dataLen))
		}
	}
	took, accepted, refused := 0, 0, 0
	for i := range 1500 {
		hdr, dataLen := randomHeader(rng)
		file := append(hdr, make([]byte, dataLen)...)
		if !headersAgree(t, file) && !strings.Contains(string(hdr), `\`) {
			t.Fatalf("the fast scanner did not take a writer's header without escapes: %q", hdr)
		}
		took++
		m := mutate(rng, hdr)
		for _, size := range []int{dataLen, dataLen + i%3} {
			file := append(m, make([]byte, size)...)
			headersAgree(t, file)
			if _, err := ParseHeader(file, int64(len(file))); err == nil {
				accepted++
			} else {
				refused++
			}
		}
	}
	if accepted < 100 || refused < 100 {
		t.Fatalf("mutations accepted %d, refused %d: the test does not exercise both", accepted, refused)
	}
	t.Logf("%d writers' headers; mutations accepted %d, refused %d", took, accepted, refused)
}

// FuzzParseHeaderFast: on any input, ParseHeader and ParseHeaderAnySize give the same with
// and without the fast scanner.
func FuzzParseHeaderFast(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		hdr, dataLen := randomHeader(rng)
		f.Add(append(hdr, make([]byte, dataLen)...))
		f.Add(mutate(rng, hdr))
	}
	f.Add(rawSafetensors(`{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}}`, 12))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, file []byte) {
		headersAgree(t, file)
	})
}

// BenchmarkParseHeader parses the header of a shard of a mixture of experts (2,500 tensors),
// fast and reference.
func BenchmarkParseHeader(b *testing.B) {
	var tensors []Tensor
	for l := range 7 {
		for e := range 128 {
			for _, p := range []string{"gate_proj", "up_proj", "down_proj"} {
				tensors = append(tensors, Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s.weight", l, e, p),
					DType: DTypeBF16, Shape: []int64{72, 512}})
			}
		}
	}
	hdr, err := EncodeHeader(map[string]string{"format": "pt"}, tensors)
	if err != nil {
		b.Fatal(err)
	}
	size := int64(len(hdr)) + tensors[len(tensors)-1].End
	for _, fast := range []bool{true, false} {
		b.Run(fmt.Sprintf("fast=%v", fast), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := parseHeader(hdr, size, fast); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
