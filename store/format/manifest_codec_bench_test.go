package format

import (
	"runtime"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
)

// The manifest codecs on a MoE version (20,000 tensors in 8 files), in one run: encoding/json
// (reflect, the reference and the codec before), github.com/go-json-experiment/json's
// Marshal/Unmarshal (v2, the encoding/json/v2 of Go 1.27: reflection too, measured as the
// library alternative; its defaults are not encoding/json's rules, so it is not a drop-in),
// and the codec in use (fast: manifest_encode.go, manifest_decode.go). live-objects/op is
// the heap objects one decoded manifest keeps alive (what the garbage collector scans while
// a version is held). docs/benchmarks.md, "Tensor count (figure 11)", has a run.
//
//	go test -run XXX -bench Manifest -benchmem ./store/format/

func BenchmarkManifestDecode(b *testing.B) {
	js, err := ManifestBody(mustEncode(b, moeManifest(20_000, 8)))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte) (*Manifest, error)
	}{
		{"reflect", decodeManifestJSONReflect},
		{"v2", func(js []byte) (*Manifest, error) {
			var m Manifest
			return &m, jsonv2.Unmarshal(js, &m, jsonv2.RejectUnknownMembers(true))
		}},
		{"fast", decodeManifestFast},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(js)))
			for range b.N {
				if _, err := c.decode(js); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(liveObjects(func() any { m, _ := c.decode(js); return m })), "live-objects/op")
		})
	}
}

func BenchmarkManifestEncode(b *testing.B) {
	m := moeManifest(20_000, 8)
	for _, c := range []struct {
		name   string
		encode func(*Manifest) ([]byte, error)
	}{
		{"reflect", encodeManifestJSONReflect},
		{"v2", func(m *Manifest) ([]byte, error) { return jsonv2.Marshal(m) }},
		{"fast", func(m *Manifest) ([]byte, error) { return appendManifestJSON(make([]byte, 0, manifestJSONLen(m)), m) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				if _, err := c.encode(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// liveObjects is the number of heap objects what make returns keeps alive.
func liveObjects(make func() any) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := make()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	return int64(after.HeapObjects) - int64(before.HeapObjects)
}
