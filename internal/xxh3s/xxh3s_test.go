package xxh3s

import (
	"math/rand"
	"testing"

	"github.com/zeebo/xxh3"
)

// TestSum128MatchesXXH3 compares the digest with zeebo's Hash128 of the same bytes: every
// length to 3 blocks and beyond, written whole, byte by byte and in random pieces.
func TestSum128MatchesXXH3(t *testing.T) {
	t.Run("avx2", testSum128)
	if hasAVX2 {
		hasAVX2 = false
		defer func() { hasAVX2 = true }()
		t.Run("generic", testSum128)
	}
}

func testSum128(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	data := make([]byte, 1<<20+77)
	rng.Read(data)
	lengths := []int{}
	for n := 0; n <= 3*1024+130; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 64<<10, 64<<10+1, 1<<20-1, 1<<20, len(data))
	for _, n := range lengths {
		p := data[:n]
		want := xxh3.Hash128(p)
		h := New()
		h.Write(p)
		if got := h.Sum128(); got != want {
			t.Fatalf("len %d whole: %x, want %x", n, got, want)
		}
		if n <= 1200 {
			h.Reset()
			for i := range p {
				h.Write(p[i : i+1])
			}
			if got := h.Sum128(); got != want {
				t.Fatalf("len %d byte by byte: %x, want %x", n, got, want)
			}
		}
		for round := 0; round < 3; round++ {
			h.Reset()
			for q := p; len(q) > 0; {
				k := min(len(q), rng.Intn(3000)+1)
				if rng.Intn(4) == 0 {
					k = min(len(q), stripe*(rng.Intn(40)+1))
				}
				if rng.Intn(10) == 0 {
					h.Write(nil)
				}
				h.Write(q[:k])
				q = q[k:]
			}
			if got := h.Sum128(); got != want {
				t.Fatalf("len %d in pieces: %x, want %x", n, got, want)
			}
		}
	}
	// Sum is zeebo's Hasher128.Sum: the same bytes.
	z := xxh3.New128()
	z.Write(data[:777])
	h := New()
	h.Write(data[:777])
	if got, want := h.Sum([]byte{1}), z.Sum([]byte{1}); string(got) != string(want) {
		t.Fatalf("Sum %x, want %x", got, want)
	}
	// Sum128 leaves the hasher going on.
	h.Reset()
	h.Write(data[:5000])
	h.Sum128()
	h.Write(data[5000:9000])
	if got, want := h.Sum128(), xxh3.Hash128(data[:9000]); got != want {
		t.Fatalf("after a Sum128: %x, want %x", got, want)
	}
}

// FuzzSum128 compares with zeebo's Hash128 for any bytes cut at any point.
func FuzzSum128(f *testing.F) {
	f.Add(make([]byte, 300), uint16(70))
	f.Add(make([]byte, 2049), uint16(1024))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		h := New()
		c := min(int(cut), len(data))
		h.Write(data[:c])
		h.Write(data[c:])
		if got, want := h.Sum128(), xxh3.Hash128(data); got != want {
			t.Fatalf("%x, want %x", got, want)
		}
	})
}

// BenchmarkWrite hashes 4 MiB in 256 KiB writes (the ingest's pieces): this package and
// zeebo's Hasher128.
func BenchmarkWrite(b *testing.B) {
	data := make([]byte, 4<<20)
	rand.New(rand.NewSource(1)).Read(data)
	b.Run("xxh3s", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		h := New()
		for range b.N {
			h.Reset()
			for q := data; len(q) > 0; q = q[256<<10:] {
				h.Write(q[:256<<10])
			}
			h.Sum128()
		}
	})
	b.Run("zeebo", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		h := xxh3.New128()
		for range b.N {
			h.Reset()
			for q := data; len(q) > 0; q = q[256<<10:] {
				h.Write(q[:256<<10])
			}
			h.Sum128()
		}
	})
	b.Run("zeebo-oneshot", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for range b.N {
			xxh3.Hash128(data)
		}
	})
}
