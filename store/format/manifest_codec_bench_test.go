package format

import (
	"encoding/json"
	"runtime"
	"syscall"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
)

// The manifest codecs on a MoE version (20,000 tensors in 8 files), in one run: encoding/json
// (reflect, the reference and the codec before), github.com/go-json-experiment/json's
// Marshal/Unmarshal (v2, the encoding/json/v2 of Go 1.27: reflection too, measured as the
// library alternative; its defaults are not encoding/json's rules, so it is not a drop-in),
// and the codec in use (fast: manifest_encode.go, manifest_decode.go). live-objects/op is
// the heap objects one decoded manifest keeps alive (what the garbage collector scans while
// a version is held); cpu-ns/op is the process's CPU per operation. docs/benchmarks.md, "Tensor count (figure 11)", has a run.
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
			cpu0 := processCPU()
			for range b.N {
				if _, err := c.decode(js); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCPU(b, cpu0)
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
			cpu0 := processCPU()
			for range b.N {
				if _, err := c.encode(m); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCPU(b, cpu0)
		})
	}
}

// processCPU is the CPU time of the process so far (its garbage collector's included): on a
// machine shared with other work, the measure to compare (ns/op is wall time).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
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

// BenchmarkManifestHead: the head of the MoE manifest (what listing versions reads), by
// encoding/json into store's manifestSummary (copied here) and by DecodeManifestHead.
func BenchmarkManifestHead(b *testing.B) {
	js, err := ManifestBody(mustEncode(b, moeManifest(20_000, 8)))
	if err != nil {
		b.Fatal(err)
	}
	type summary struct {
		Version  uint64        `json:"version"`
		Created  time.Time     `json:"created"`
		Previous uint64        `json:"previous"`
		Files    []skipped     `json:"files"`
		Stats    ManifestStats `json:"stats"`
		Indexes  []string      `json:"indexes"`
	}
	for _, c := range []struct {
		name   string
		decode func([]byte) error
	}{
		{"reflect", func(js []byte) error { var s summary; return json.Unmarshal(js, &s) }},
		{"fast", func(js []byte) error { _, err := DecodeManifestHead(js); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(js)))
			cpu0 := processCPU()
			for range b.N {
				if err := c.decode(js); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCPU(b, cpu0)
		})
	}
}

type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }
