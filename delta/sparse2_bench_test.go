package delta

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"unsafe"
)

// BenchmarkDecodeBlockVersions decodes one block of 2^20 bf16 elements, about 2.5% of them
// changed, coded as version 1 and as version 2 against the step before (whose decoded block,
// as a reader holding it would have it, is the context; "fresh context" also pays the
// context's checksum, as the first use of a newly decoded context does). And the encoders of
// both versions on the same step.
func BenchmarkDecodeBlockVersions(b *testing.B) {
	rng := rand.New(rand.NewPCG(20, 9))
	const n = 1 << 20
	versions := driftChain(rng, n, 2, true, 2, 0.025)
	prev, err := EncodeDelta(nil, versions[0], versions[1], 2, true)
	if err != nil {
		b.Fatal(err)
	}
	pd, _ := OpenDelta(prev)
	ctxBlock, err := pd.DecodeBlock(0)
	if err != nil {
		b.Fatal(err)
	}
	ctx := func(int64) (*DecodedBlock, error) { return ctxBlock, nil }
	v1, err := EncodeDelta(nil, versions[1], versions[2], 2, true)
	if err != nil {
		b.Fatal(err)
	}
	v2 := encodeAgainst(b, versions[1], versions[2], 2, true, defaultBlockShift, ctx)
	d1, _ := OpenDelta(v1)
	d2, _ := OpenDelta(v2)
	d2.SetContext(ctx)
	info := d1.Info()
	b.Logf("%d changes: version 1 %d bytes (%.3f B/change), version 2 %d bytes (%.3f B/change)",
		info.Changed, len(v1), float64(len(v1))/float64(info.Changed), len(v2), float64(len(v2))/float64(info.Changed))
	for _, bc := range []struct {
		name  string
		d     *Delta
		fresh bool
	}{{"v1", d1, false}, {"v2", d2, false}, {"v2-fresh-context", d2, true}} {
		b.Run("decode-"+bc.name, func(b *testing.B) {
			b.SetBytes(2 * n)
			var into *DecodedBlock
			for range b.N {
				if bc.fresh {
					ctxBlock.sum.Store(0)
				}
				if into, err = bc.d.DecodeBlockInto(0, into); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, bc := range []struct {
		name string
		ctx  ContextFunc
	}{{"v1", nil}, {"v2", ctx}} {
		b.Run("encode-"+bc.name, func(b *testing.B) {
			b.SetBytes(2 * n)
			for range b.N {
				enc := NewDeltaEncoder(2, true, n)
				enc.SetContext(bc.ctx)
				if _, err := enc.AddDiff(0, versions[1], versions[2]); err != nil {
					b.Fatal(err)
				}
				if _, err := enc.Finish(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadPathVersions is BenchmarkReadPath on ten consecutive steps of one 1 MiB bf16
// page (driftChain, ~1% changed per step), coded as version 1 and as a chain of version 2
// (each against the step before, the first against an eleventh step): decoding the ten blocks
// (version 2 against the context blocks, decoded beforehand as a reader's cache holds them) and
// applying them.
func BenchmarkReadPathVersions(b *testing.B) {
	rng := rand.New(rand.NewPCG(20, 10))
	const n = 1 << 19 // one block of 2^20 elements is two such pages; a page is one block here
	versions := driftChain(rng, n, 2, true, 11, 0.01)
	var v1, v2 []*Delta
	var ctxBlocks []*DecodedBlock
	for s := 1; s <= 11; s++ {
		body, err := EncodeDelta(nil, versions[s-1], versions[s], 2, true)
		if err != nil {
			b.Fatal(err)
		}
		d, _ := OpenDelta(body)
		if s == 1 {
			db, _ := d.DecodeBlock(0)
			ctxBlocks = append(ctxBlocks, db)
			continue
		}
		v1 = append(v1, d)
		prev := ctxBlocks[len(ctxBlocks)-1]
		ctx := func(int64) (*DecodedBlock, error) { return prev, nil }
		d2, _ := OpenDelta(encodeAgainst(b, versions[s-1], versions[s], 2, true, defaultBlockShift, ctx))
		d2.SetContext(ctx)
		v2 = append(v2, d2)
		db, err := d2.DecodeBlock(0)
		if err != nil {
			b.Fatal(err)
		}
		ctxBlocks = append(ctxBlocks, db)
	}
	var size1, size2 int
	for i := range v1 {
		size1, size2 = size1+len(v1[i].l.body), size2+len(v2[i].l.body)
	}
	b.Logf("ten steps: version 1 %d bytes, version 2 %d bytes", size1, size2)
	page := make([]byte, 2*n)
	for _, bc := range []struct {
		name   string
		deltas []*Delta
	}{{"v1", v1}, {"v2", v2}} {
		b.Run("decode-"+bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(page)))
			for range b.N {
				for _, d := range bc.deltas {
					if _, err := d.DecodeBlock(0); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		var steps []BlockStep
		for _, d := range bc.deltas {
			db, _ := d.DecodeBlock(0)
			steps = append(steps, BlockStep{db, Forward})
		}
		b.Run("apply-"+bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(page)))
			for range b.N {
				if err := ApplySteps(page, 0, steps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeBlockV2 decodes one version-2 block of 2^20 bf16 elements against the step
// before, at the densities of lr 3e-6 in steady state (~1-3% of the elements changed per
// version): the read path's decoder (DecodeBlockInto). It reports the process's CPU time per
// change (cpu-ns/change, from getrusage: on a loaded machine wall time is not the cost).
func BenchmarkDecodeBlockV2(b *testing.B) {
	for _, density := range []float64{0.01, 0.025} {
		rng := rand.New(rand.NewPCG(20, 11))
		const n = 1 << 20
		versions := driftChain(rng, n, 2, true, 2, density)
		prev, err := EncodeDelta(nil, versions[0], versions[1], 2, true)
		if err != nil {
			b.Fatal(err)
		}
		pd, _ := OpenDelta(prev)
		ctxBlock, err := pd.DecodeBlock(0)
		if err != nil {
			b.Fatal(err)
		}
		ctx := func(int64) (*DecodedBlock, error) { return ctxBlock, nil }
		d, _ := OpenDelta(encodeAgainst(b, versions[1], versions[2], 2, true, defaultBlockShift, ctx))
		d.SetContext(ctx)
		changes := float64(d.Info().Changed)
		b.Run(fmt.Sprintf("density-%g", density), func(b *testing.B) {
			b.SetBytes(2 * n)
			b.ReportAllocs()
			var into *DecodedBlock
			cpu0 := processCPU()
			for range b.N {
				if into, err = d.DecodeBlockInto(0, into); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/changes, "cpu-ns/change")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/changes, "ns/change")
		})
	}
}

// processCPU is the process's user and system CPU time so far, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkDecodeBlockV2Ref is BenchmarkDecodeBlockV2 with today's reference decoder (decode,
// then compact) and the fast one alternated block by block on one locked thread, each timed
// by the thread's CPU clock: on a loaded machine, the ratio of the two is the number to read
// (fast/ref), the absolute times move with the load.
func BenchmarkDecodeBlockV2Ref(b *testing.B) {
	for _, density := range []float64{0.01, 0.025} {
		rng := rand.New(rand.NewPCG(20, 11))
		const n = 1 << 20
		versions := driftChain(rng, n, 2, true, 2, density)
		prev, err := EncodeDelta(nil, versions[0], versions[1], 2, true)
		if err != nil {
			b.Fatal(err)
		}
		pd, _ := OpenDelta(prev)
		ctxBlock, err := pd.DecodeBlock(0)
		if err != nil {
			b.Fatal(err)
		}
		ctx := func(int64) (*DecodedBlock, error) { return ctxBlock, nil }
		d, _ := OpenDelta(encodeAgainst(b, versions[1], versions[2], 2, true, defaultBlockShift, ctx))
		count, _ := d.l.entry(0)
		payload, blockLen := d.l.body[d.offsets[0]:d.offsets[1]], d.l.blockLen(0)
		b.Run(fmt.Sprintf("density-%g", density), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			values := newValueMap(2, true)
			ref := &block2Decoder{width: 2, values: values}
			fast := &block2Decoder{width: 2, values: values}
			into := &DecodedBlock{width: 2, values: values}
			var refCPU, fastCPU int64
			for range b.N {
				t0 := threadCPU()
				if err := ref.decode(payload, int(count), blockLen, ctxBlock); err != nil {
					b.Fatal(err)
				}
				ref.compact(into)
				t1 := threadCPU()
				if err := fast.decodeInto(payload, int(count), blockLen, ctxBlock, into); err != nil {
					b.Fatal(err)
				}
				t2 := threadCPU()
				refCPU, fastCPU = refCPU+t1-t0, fastCPU+t2-t1
			}
			per := float64(b.N) * float64(count)
			b.ReportMetric(float64(refCPU)/per, "ref-cpu-ns/change")
			b.ReportMetric(float64(fastCPU)/per, "fast-cpu-ns/change")
			b.ReportMetric(float64(fastCPU)/float64(refCPU), "fast/ref")
		})
	}
}

// threadCPU is the calling thread's CPU time so far, in nanoseconds.
func threadCPU() int64 {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return ts.Nano()
}
