package delta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// syntheticVersions makes a bf16 safetensors file of about size bytes (one large embedding
// and equal layers, random values) and the file after an RL-like step in which about
// density of the elements changed by one or two ULPs at random positions.
func syntheticVersions(t testing.TB, size int64, density float64, seed uint64) (base, result []byte) {
	t.Helper()
	elements := size / 2
	const layers = 24
	embed := elements / 8
	tensors := []Tensor{{Name: "model.embed_tokens.weight", DType: DTypeBF16, Shape: []int64{embed / 64, 64}}}
	per := (elements - embed) / layers
	for i := range layers {
		tensors = append(tensors, Tensor{Name: fmt.Sprintf("model.layers.%d.mlp.weight", i), DType: DTypeBF16, Shape: []int64{per}})
	}
	hdr, err := EncodeHeader(map[string]string{"format": "pt"}, tensors)
	if err != nil {
		t.Fatal(err)
	}
	var dataLen int64
	for _, tt := range tensors {
		dataLen += tt.Elements() * 2
	}
	r := rand.New(rand.NewPCG(seed, 2))
	base = make([]byte, int64(len(hdr))+dataLen)
	copy(base, hdr)
	data := base[len(hdr):]
	for i := 0; i+8 <= len(data); i += 8 {
		binary.LittleEndian.PutUint64(data[i:], r.Uint64())
	}
	result = bytes.Clone(base)
	rdata := result[len(hdr):]
	// Gaps between changed elements are geometric with mean 1/density.
	mean := 1 / density
	for e := int64(r.ExpFloat64() * mean); e < dataLen/2; e += 1 + int64(r.ExpFloat64()*mean) {
		v := binary.LittleEndian.Uint16(rdata[2*e:])
		binary.LittleEndian.PutUint16(rdata[2*e:], v+1+uint16(r.IntN(2)))
	}
	return base, result
}

// BenchmarkApplyPatch applies a ~1% patch to a 256 MiB bf16 file on disk (in the page cache,
// as on an inference node that just loaded it) and, in the same run, rewrites the file with
// fsync, the baseline of docs/benchmarks.md's apply figure (apply <= 0.1x rewrite). Run it alone:
//
//	go test ./delta/ -run '^$' -bench ApplyPatch -benchtime 5x
//
// It reports apply-s, rewrite-s and their ratio; -sync and -sha256 variants are sub-benchmarks.
func BenchmarkApplyPatch(b *testing.B) {
	const size = 256 << 20
	base, result := syntheticVersions(b, size, 0.0097, 1)
	dir := b.TempDir()
	patchPath := filepath.Join(dir, "patch.safetensors")
	pf, err := os.Create(patchPath)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := BuildPatchWith(pf, 2, 1, []PatchSource{{Name: "model.safetensors",
		Base: bytes.NewReader(base), BaseSize: int64(len(base)), Result: bytes.NewReader(result), ResultSize: int64(len(result))}}, PatchBuildOptions{}); err != nil {
		b.Fatal(err)
	}
	pf.Close()
	target := filepath.Join(dir, "model.safetensors")
	for _, bc := range []struct {
		name string
		opts ApplyOptions
	}{{"default", ApplyOptions{}}, {"sync", ApplyOptions{Sync: true}}, {"sha256", ApplyOptions{VerifySHA256: true}}} {
		b.Run(bc.name, func(b *testing.B) {
			var applyTime, rewriteTime time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				writeSynced(b, target, base) // the target starts clean and in the page cache
				b.StartTimer()
				began := time.Now()
				res, err := ApplyPatchFileWith(patchPath, target, bc.opts)
				applyTime += time.Since(began)
				if err != nil || res.AlreadyApplied {
					b.Fatalf("apply: %+v %v", res, err)
				}
				b.StopTimer()
				if got, _ := os.ReadFile(target); !bytes.Equal(got, result) {
					b.Fatal("the patched file differs from the result")
				}
				os.Remove(target)
				began = time.Now()
				writeSynced(b, filepath.Join(dir, "rewrite.safetensors"), result)
				rewriteTime += time.Since(began)
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(applyTime.Seconds()/n, "apply-s")
			b.ReportMetric(rewriteTime.Seconds()/n, "rewrite-s")
			b.ReportMetric(applyTime.Seconds()/rewriteTime.Seconds(), "apply/rewrite")
			b.Logf("%s: apply %.3f s, rewrite+fsync %.3f s of a %d MiB file: %.3fx", bc.name,
				applyTime.Seconds()/n, rewriteTime.Seconds()/n, size>>20, applyTime.Seconds()/rewriteTime.Seconds())
		})
	}
}

// writeSynced writes data to a new file at path and fsyncs it.
func writeSynced(t testing.TB, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
