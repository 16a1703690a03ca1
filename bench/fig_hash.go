package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"math/bits"
	"runtime"
	"sync"

	zeebo "github.com/zeebo/blake3"
	luke "lukechampine.com/blake3"
	"lukechampine.com/blake3/guts"

	"github.com/weightfs/weightfs/internal/sha256x2"
)

// Figure 12 (hash): issue 30's measurement of the hash that could name objects and files in
// one pass per byte. Today every byte ingested is hashed twice, for its tensor and its file
// (sha256x2.WriteBoth: two SHA-256 streams in one pass with the SHA extensions). Against that
// baseline, each on the same bytes in one run: crypto/sha256 (one stream), and BLAKE3 from
// github.com/zeebo/blake3 and lukechampine.com/blake3 on one core, and BLAKE3's tree mode over
// every core (lukechampine's guts: subtrees hashed in parallel and joined, checked equal to
// Sum256 by TestBlake3TreeMatchesSum256). Two input sizes: one large tensor (256 MiB) and the
// small tensors of a mixture of experts (64 KiB each, one digest per tensor).

const (
	hashLargeBytes = 256 << 20
	hashSmallBytes = 64 << 10
	hashPasses     = 5
)

// blake3Tree is BLAKE3 of b with the tree split over par goroutines: the left subtree of a
// node covers the largest power of two of chunks below its length (as the specification
// builds the tree), so the root is the same as one core's.
func blake3Tree(b []byte, par int) [32]byte {
	n := blake3Subtree(b, 0, par)
	n.Flags |= guts.FlagRoot
	out := guts.WordsToBytes(guts.CompressNode(n))
	return [32]byte(out[:32])
}

func blake3Subtree(b []byte, counter uint64, par int) guts.Node {
	chunks := (len(b) + guts.ChunkSize - 1) / guts.ChunkSize
	if chunks <= 1 {
		return guts.CompressChunk(b, &guts.IV, counter, 0)
	}
	if par <= 1 && chunks&(chunks-1) == 0 && len(b) == chunks*guts.ChunkSize {
		return guts.CompressEigentree(b, &guts.IV, counter, 0)
	}
	left := 1 << (bits.Len(uint(chunks-1)) - 1)
	split := left * guts.ChunkSize
	var l, r guts.Node
	if par > 1 {
		var wg sync.WaitGroup
		wg.Go(func() { l = blake3Subtree(b[:split], counter, par/2) })
		r = blake3Subtree(b[split:], counter+uint64(left), par-par/2)
		wg.Wait()
	} else {
		l = blake3Subtree(b[:split], counter, 1)
		r = blake3Subtree(b[split:], counter+uint64(left), 1)
	}
	return guts.ParentNode(guts.ChainingValue(l), guts.ChainingValue(r), &guts.IV, 0)
}

func (b *bench) figHash(ctx context.Context) ([]Row, error) {
	large := make([]byte, hashLargeBytes)
	if _, err := rand.Read(large); err != nil {
		return nil, err
	}
	cores := runtime.GOMAXPROCS(0)
	b.logf("hash: %s and %d inputs of %s, best of %d, %d cores", humanBytes(hashLargeBytes), hashLargeBytes/hashSmallBytes, humanBytes(hashSmallBytes), hashPasses, cores)
	type candidate struct {
		name string
		sum  func([]byte)
	}
	var sinkA, sinkB [32]byte
	cands := []candidate{
		{"sha256x2: a tensor's and its file's SHA-256 in one pass (today)", func(p []byte) {
			t, f := sha256x2.New(), sha256x2.New()
			sha256x2.WriteBoth(t, f, p)
			t.Sum(sinkA[:0])
			f.Sum(sinkB[:0])
		}},
		{"crypto/sha256, one stream", func(p []byte) { sinkA = sha256.Sum256(p) }},
		{"BLAKE3, github.com/zeebo/blake3, 1 core", func(p []byte) { sinkA = zeebo.Sum256(p) }},
		{"BLAKE3, lukechampine.com/blake3, 1 core", func(p []byte) { sinkA = luke.Sum256(p) }},
		{fmt.Sprintf("BLAKE3 tree, lukechampine.com/blake3/guts, %d cores", cores), func(p []byte) { sinkA = blake3Tree(p, cores) }},
	}
	var rows []Row
	for _, size := range []int{hashLargeBytes, hashSmallBytes} {
		var baseline float64
		for i, c := range cands {
			if err := ctx.Err(); err != nil {
				return rows, err
			}
			t, _ := bestOf(hashPasses, func() error {
				for off := 0; off+size <= len(large); off += size {
					c.sum(large[off : off+size])
				}
				return nil
			})
			rate := gbPerSecond(len(large), t)
			row := Row{Figure: "12", Name: fmt.Sprintf("hash, %s inputs: %s", humanBytes(int64(size)), c.name), Measured: rate, Unit: "GB/s",
				Detail: map[string]any{"input_bytes": size, "bytes": len(large), "passes": hashPasses, "cores": cores}}
			if i == 0 {
				baseline = rate
				row.Note = "no goal: issue 30 asks for the measurement; GB/s of input (sha256x2 makes two digests of each byte, the others one)"
			} else {
				row.Baseline, row.BaselineName = baseline, "sha256x2 (today)"
			}
			rows = append(rows, row)
		}
	}
	_, _ = sinkA, sinkB
	return rows, nil
}
