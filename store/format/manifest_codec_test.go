package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// moeManifest is a version of a mixture of experts: n tensors named as Hugging Face names
// them, in files safetensors files, each with a base (version 2 of a run).
func moeManifest(n, files int) *Manifest {
	m := &Manifest{Version: 2, Previous: 1, Created: time.Date(2026, 11, 28, 12, 0, 0, 123456789, time.UTC), Dirs: []ManifestDir{}}
	per := (n + files - 1) / files
	for f, k := 0, 0; f < files; f++ {
		mf := ManifestFile{Path: fmt.Sprintf("model-%05d-of-%05d.safetensors", f+1, files), Mode: 0o644,
			Kind: KindSafetensors, Header: IDOf([]byte{byte(f)}), HeaderLen: 40_000, SHA256: IDOf([]byte{byte(f), 1})}
		var off int64
		for i := 0; i < per && k < n; i++ {
			t := ManifestTensor{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.%s_proj.weight", k/384, k/3%128, []string{"gate", "up", "down"}[k%3]),
				DType: delta.DTypeBF16, Shape: []int64{64, 512}, Begin: off, End: off + 64*512*2,
				ID: IDOf(fmt.Appendf(nil, "id%d", k)), Base: IDOf(fmt.Appendf(nil, "base%d", k)), Changed: 655,
				XXH3: XXH3Of(fmt.Appendf(nil, "id%d", k))}
			off = t.End
			mf.Tensors = append(mf.Tensors, t)
			k++
		}
		mf.Size = mf.HeaderLen + off
		m.Files = append(m.Files, mf)
	}
	m.Stats = ManifestStats{LogicalBytes: 1 << 30, NewObjects: int64(n), NewObjectBytes: 1 << 25, ChangedElems: 655 * int64(n), TotalElems: 32768 * int64(n)}
	return m
}

// oddManifests are manifests whose strings and slices take every way the encoders have:
// escapes, HTML characters, non-ASCII, invalid UTF-8 in a tensor name (encoding/json writes
// U+FFFD), U+2028, nil and empty slices, absent optional fields, pack indexes, long paths.
func oddManifests() []*Manifest {
	long := strings.Repeat("d/", 1600) + "f"
	one := func(names ...string) *Manifest {
		m := &Manifest{Version: 7, Created: time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))}
		f := ManifestFile{Path: "a\\b\n\"<&>\t\u2028é/model.safetensors", Mode: 0o600, Kind: KindSafetensors, Header: IDOf(nil), HeaderLen: 8}
		for i, n := range names {
			var shape []int64
			switch i % 3 {
			case 1:
				shape = []int64{}
			case 2:
				shape = []int64{1, 0, 3}
			}
			f.Tensors = append(f.Tensors, ManifestTensor{Name: n, DType: delta.DType([]string{"F32", "BF16", "F8_E4M3", "X\x01"}[i%4]), Shape: shape,
				Begin: int64(i), End: int64(i + 1), ID: IDOf([]byte(n)), Changed: int64(-i)})
			if i%2 == 1 {
				f.Tensors[i].XXH3 = XXH3Of([]byte(n)) // some tensors with a digest, some without
			}
		}
		m.Files = []ManifestFile{f, {Path: "blob", Kind: KindBlob, ID: IDOf([]byte("b")), Size: -1, Tensors: []ManifestTensor{}}}
		return m
	}
	return []*Manifest{
		{},
		{Version: 1, Dirs: []ManifestDir{}, Files: []ManifestFile{}, Indexes: []string{}},
		{Version: 3, Previous: 2, Dirs: []ManifestDir{{Path: long, Mode: 0o755}, {Path: "é\u2029"}}, Indexes: []string{"p-1", "a<b"}},
		one("plain", "with \"quote\"", "back\\slash", "ctl\x00\x1f\x7f", "<script>&amp;", "ünïcødé ☃ 𝄞", "bad\xff\xfeutf8", "\u2028\u2029", ""),
		one(),
		moeManifest(300, 3),
	}
}

func mustEncode(t testing.TB, m *Manifest) []byte {
	t.Helper()
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fixtureManifests are the manifests of the stores in store/testdata.
func fixtureManifests(t testing.TB) [][]byte {
	paths, err := filepath.Glob("../testdata/*/versions/v*")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixture manifests: %v", err)
	}
	var out [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkDecodersAgree decodes js both ways: where the fast decoder accepts, encoding/json
// accepts too and decodes the same value (nil and empty slices apart, shapes and all), and
// the two encoders write the same bytes for it. It reports whether the fast decoder accepted.
func checkDecodersAgree(t *testing.T, js []byte) bool {
	t.Helper()
	fast, ferr := decodeManifestFast(js)
	ref, rerr := decodeManifestJSONReflect(js)
	if ferr != nil {
		return false
	}
	if rerr != nil {
		t.Fatalf("fast decoder accepts what encoding/json refuses (%v): %q", rerr, js)
	}
	if !reflect.DeepEqual(fast, ref) {
		t.Fatalf("decoders disagree on %q:\nfast %#v\nref  %#v", js, fast, ref)
	}
	checkEncodersAgree(t, fast)
	return true
}

// checkEncodersAgree: appendManifestJSON writes encoding/json's bytes for m, or fails where it
// fails.
func checkEncodersAgree(t *testing.T, m *Manifest) {
	t.Helper()
	want, werr := encodeManifestJSONReflect(m)
	got, gerr := appendManifestJSON(nil, m)
	if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("encoders disagree:\nfast %q (%v)\nref  %q (%v)", got, gerr, want, werr)
	}
}

// TestManifestCodecsAgree: for the fixtures' manifests, odd ones and a MoE-sized one, the
// fast codec and encoding/json write the same bytes and read the same values, and the fast
// decoder reads every manifest the encoder writes (none left to the reference).
func TestManifestCodecsAgree(t *testing.T) {
	var all [][]byte
	for _, m := range append(oddManifests(), moeManifest(20_000, 8)) {
		checkEncodersAgree(t, m)
		all = append(all, mustEncode(t, m))
	}
	fixtures := fixtureManifests(t)
	for _, b := range append(all, fixtures...) {
		js, err := ManifestBody(b)
		if err != nil {
			continue // v1-flipped-manifest
		}
		if !checkDecodersAgree(t, js) {
			_, err := decodeManifestFast(js)
			t.Fatalf("fast decoder leaves an encoder's manifest to encoding/json (%v): %.200q", err, js)
		}
		m, _ := decodeManifestFast(js)
		if again := mustEncode(t, m); m.Validate() == nil && !bytes.Equal(again, b) {
			t.Fatalf("manifest does not encode to its own bytes: %.200q", js)
		}
	}
	// Same JSON written otherwise: the fast decoder reads what differs in whitespace, key
	// order and escapes, and leaves to encoding/json what only it reads (keys in another case,
	// a key twice, nulls, trailing bytes), or refuses.
	js, _ := ManifestBody(mustEncode(t, oddManifests()[3]))
	for _, tc := range []struct {
		name string
		js   string
		fast bool
	}{
		{"as written", string(js), true},
		{"spaces", strings.ReplaceAll(strings.ReplaceAll(string(js), `,"`, " ,\n \""), `":`, "\"\t: "), true},
		{"escaped letters", strings.Replace(string(js), `"plain"`, `"pl\u0061in"`, 1), true},
		{"escaped id", strings.Replace(string(js), `"id":"`, `"id":"\u0030`, 1), false}, // a digit more: refused
		{"key order", `{"stats":{"total_elements":1},"files":[{"tensors":[{"changed":1,"name":"x","shape":[2]}],"path":"a"}],"version":3}`, true},
		{"key case", strings.Replace(string(js), `"version"`, `"Version"`, 1), false},
		{"key escaped", strings.Replace(string(js), `"version"`, `"versio\u006e"`, 1), false},
		{"kelvin", strings.Replace(string(js), `"kind"`, `"\u212aind"`, 1), false},
		{"key twice", strings.Replace(string(js), `{"version":7,`, `{"version":8,"version":7,`, 1), false},
		{"null stats", strings.Replace(string(js), `"stats":{`, `"stats":null,"x":{`, 1), false},
		{"null shape", strings.Replace(string(js), `"shape":[]`, `"shape":null`, 1), true},
		{"null files", `{"version":1,"files":null,"dirs":null,"indexes":null}`, true},
		{"empty", `{}`, true},
		{"trailing brace", string(js) + "}", false},
		{"trailing value", string(js) + " 1", false},
		{"trailing space", string(js) + " \n", true},
		{"unknown key", strings.Replace(string(js), `{"version":7,`, `{"versions":7,`, 1), false},
		{"float", strings.Replace(string(js), `"mode":384`, `"mode":384.0`, 1), false},
		{"mode too large", strings.Replace(string(js), `"mode":384`, `"mode":4294967296`, 1), false},
		{"negative version", strings.Replace(string(js), `"version":7`, `"version":-7`, 1), false},
		{"invalid utf-8", strings.Replace(string(js), `"plain"`, "\"pl\xffin\"", 1), false},
		{"string number", strings.Replace(string(js), `"version":7`, `"version":"7"`, 1), false},
		{"null element", `{"version":1,"files":[null]}`, false},
		{"xxh3", strings.Replace(string(js), `"changed":0}`, `"changed":0,"xxh3":"0123456789abcdef0123456789abcdef"}`, 1), true},
		{"xxh3 upper case", strings.Replace(string(js), `"changed":0}`, `"changed":0,"xxh3":"0123456789ABCDEF0123456789abcdef"}`, 1), false},
		{"xxh3 short", strings.Replace(string(js), `"changed":0}`, `"changed":0,"xxh3":"0123456789abcdef0123456789abcde"}`, 1), false},
		{"xxh3 null", strings.Replace(string(js), `"changed":0}`, `"changed":0,"xxh3":null}`, 1), false},
		{"xxh3 number", strings.Replace(string(js), `"changed":0}`, `"changed":0,"xxh3":1}`, 1), false},
		{"bad time", strings.Replace(string(js), `"created":"2026`, `"created":"x2026`, 1), false},
	} {
		if got := checkDecodersAgree(t, []byte(tc.js)); got != tc.fast {
			_, err := decodeManifestFast([]byte(tc.js))
			t.Errorf("%s: fast decoder accepts: %v, want %v (%v)", tc.name, got, tc.fast, err)
		}
	}
}

// TestDecodeManifestFallsBack: JSON the fast decoder leaves alone is still read, by
// encoding/json, as before (a key in another case), and refused as before.
func TestDecodeManifestFallsBack(t *testing.T) {
	js, _ := ManifestBody(mustEncode(t, moeManifest(3, 1)))
	frame := func(js string) []byte {
		b := binary.LittleEndian.AppendUint16([]byte(ManifestMagic), ManifestFormatVersion)
		b = binary.LittleEndian.AppendUint64(append(b, 0, 0), uint64(len(js)))
		b = append(b, js...)
		return binary.LittleEndian.AppendUint32(b, CRC32C(b))
	}
	cased := strings.Replace(string(js), `"version"`, `"VERSION"`, 1)
	m, err := DecodeManifest(frame(cased))
	if err != nil || m.Version != 2 {
		t.Fatalf("a manifest with a key in capitals: %v, %v", m, err)
	}
	if _, err := decodeManifestFast([]byte(cased)); err == nil {
		t.Fatal("the fast decoder read a key in capitals: this test no longer tests the fallback")
	}
	twice := strings.Replace(string(js), `"size":`, `"size":1,"size":`, 1)
	if _, err := DecodeManifest(frame(twice)); err != nil {
		t.Fatalf("a key twice (encoding/json keeps the last): %v", err)
	}
	bad := strings.Replace(string(js), `"mode":420`, `"mode":-1`, 1)
	if _, err := DecodeManifest(frame(bad)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a negative mode: %v, want ErrCorrupt", err)
	}
}

// FuzzManifestDecoders: on any JSON, where the fast decoder accepts, encoding/json accepts
// and decodes the same value, and both encoders write the same bytes for it (where it refuses,
// DecodeManifest asks encoding/json: the same verdict by construction).
func FuzzManifestDecoders(f *testing.F) {
	for _, m := range oddManifests()[:5] {
		js, _ := ManifestBody(mustEncode(f, m))
		f.Add(js)
	}
	f.Add([]byte(`{"version":1,"files":null,"dirs":[],"indexes":null,"stats":{"total_elements":3}}`))
	f.Add([]byte(`{"files":[{"path":"a","tensors":[{"shape":[1,2,3],"name":"x\u00e9","dtype":"F16"}]}]} `))
	f.Add([]byte(`{"Version":1,"version":2}`))
	f.Add([]byte(`{"files":[{"tensors":[{"xxh3":"0123456789abcdef0123456789abcdeF"}]}]}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		checkDecodersAgree(t, js)
	})
}
