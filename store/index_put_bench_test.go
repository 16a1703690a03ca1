package store

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// BenchmarkPutObjects writes the metas of a MoE version (3,000 new objects, random ids) into
// an index that holds those of nine versions before it, one transaction per version as a
// seal's flushMetas does.
func BenchmarkPutObjects(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	metasOf := func() map[ID]objMeta {
		m := map[ID]objMeta{}
		for range 3000 {
			var id ID
			for i := range id {
				id[i] = byte(rng.Uint32())
			}
			m[id] = objMeta{Kind: kindDelta, Width: 2, ContentLen: 50000, FileSize: 2000, DeltaLen: 1900, Depth: 1, ChainBytes: 1900}
		}
		return m
	}
	ix, err := openIndex(filepath.Join(b.TempDir(), "index.db"), indexOwner{Store: "bench", Own: true}, logtest.New(func(string, ...any) {}))
	if err != nil {
		b.Fatal(err)
	}
	defer ix.close()
	for range 9 {
		if err := ix.putObjects(metasOf()); err != nil {
			b.Fatal(err)
		}
	}
	versions := make([]map[ID]objMeta, b.N)
	for i := range versions {
		versions[i] = metasOf()
	}
	b.ResetTimer()
	cpu0 := processCPU()
	for i := range b.N {
		if err := ix.putObjects(versions[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((processCPU()-cpu0).Seconds()*1e3/float64(b.N), "cpu-ms/op")
}
