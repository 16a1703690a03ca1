package sha256x2

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestKnownDigests(t *testing.T) {
	for _, tc := range []struct{ in, hex string }{
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
		{strings.Repeat("a", 1000000), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
	} {
		d := New()
		d.Write([]byte(tc.in))
		if got := hexOf(d.Sum(nil)); got != tc.hex {
			t.Errorf("SHA-256 of %d bytes: %s, want %s", len(tc.in), got, tc.hex)
		}
		a, b := New(), New()
		WriteBoth(a, b, []byte(tc.in))
		if ga, gb := hexOf(a.Sum(nil)), hexOf(b.Sum(nil)); ga != tc.hex || gb != tc.hex {
			t.Errorf("WriteBoth of %d bytes: %s and %s, want %s", len(tc.in), ga, gb, tc.hex)
		}
	}
}

// TestWriteBothMatchesSHA256: two digests fed at different block offsets (prefixes of their
// own), then the same bytes in pieces of random sizes, equal crypto/sha256 of their streams,
// at every point.
func TestWriteBothMatchesSHA256(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<20+333)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for trial := 0; trial < 300; trial++ {
		preA, preB := data[:rng.IntN(200)], data[7:7+rng.IntN(200)]
		a, b := New(), New()
		ra, rb := sha256.New(), sha256.New()
		a.Write(preA)
		ra.Write(preA)
		b.Write(preB)
		rb.Write(preB)
		for off := 0; off < len(data); {
			n := min(len(data)-off, pieceSize(rng))
			WriteBoth(a, b, data[off:off+n])
			ra.Write(data[off : off+n])
			rb.Write(data[off : off+n])
			off += n
			if rng.IntN(8) == 0 || off == len(data) {
				if !bytes.Equal(a.Sum(nil), ra.Sum(nil)) || !bytes.Equal(b.Sum(nil), rb.Sum(nil)) {
					t.Fatalf("trial %d: after %d bytes (prefixes %d and %d) the digests differ from crypto/sha256", trial, off, len(preA), len(preB))
				}
			}
			if rng.IntN(50) == 0 { // a tensor ends: one digest starts again
				a.Reset()
				ra.Reset()
			}
		}
	}
}

func pieceSize(rng *rand.Rand) int {
	switch rng.IntN(4) {
	case 0:
		return rng.IntN(70)
	case 1:
		return 64 * rng.IntN(5)
	case 2:
		return rng.IntN(5000)
	}
	return rng.IntN(300000)
}

// TestKernelMatchesReference runs the two-stream kernel and the portable compression
// function over the same blocks from random states.
func TestKernelMatchesReference(t *testing.T) {
	if !useKernel {
		t.Skip("no SHA extensions here: the kernel is not used")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(40)
		pa, pb := make([]byte, n*BlockSize), make([]byte, n*BlockSize)
		for i := range pa {
			pa[i], pb[i] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		var ha, hb [8]uint32
		for i := range ha {
			ha[i], hb[i] = rng.Uint32(), rng.Uint32()
		}
		ra, rb := ha, hb
		blocks2(&ha, &pa[0], &hb, &pb[0], n)
		blockGeneric(&ra, pa)
		blockGeneric(&rb, pb)
		if ha != ra || hb != rb {
			t.Fatalf("trial %d (%d blocks): kernel %x %x, reference %x %x", trial, n, ha, hb, ra, rb)
		}
	}
}

// TestSumLeavesDigest: Sum does not change what is being hashed.
func TestSumLeavesDigest(t *testing.T) {
	d, r := New(), sha256.New()
	for _, s := range []string{"a", strings.Repeat("b", 63), strings.Repeat("c", 200)} {
		d.Write([]byte(s))
		r.Write([]byte(s))
		d.Sum(nil)
		if !bytes.Equal(d.Sum([]byte("x")), r.Sum([]byte("x"))) {
			t.Fatalf("after %q: Sum differs", s)
		}
	}
}

func FuzzWriteBoth(f *testing.F) {
	f.Add([]byte("abc"), uint8(3), uint8(60), uint16(10))
	f.Add(bytes.Repeat([]byte{1}, 1000), uint8(0), uint8(63), uint16(129))
	f.Fuzz(func(t *testing.T, data []byte, preA, preB uint8, cut uint16) {
		a, b := New(), New()
		ra, rb := sha256.New(), sha256.New()
		pa, pb := data[:min(int(preA), len(data))], data[:min(int(preB), len(data))]
		a.Write(pa)
		ra.Write(pa)
		b.Write(pb)
		rb.Write(pb)
		c := min(int(cut), len(data))
		for _, piece := range [][]byte{data[:c], data[c:]} {
			WriteBoth(a, b, piece)
			ra.Write(piece)
			rb.Write(piece)
		}
		if !bytes.Equal(a.Sum(nil), ra.Sum(nil)) || !bytes.Equal(b.Sum(nil), rb.Sum(nil)) {
			t.Fatalf("digests differ from crypto/sha256 (%d bytes, prefixes %d %d, cut %d)", len(data), len(pa), len(pb), c)
		}
	})
}

// BenchmarkWriteBoth hashes 4 MiB into two digests at different block offsets; the baseline
// in the same run is two crypto/sha256 digests written in turn.
func BenchmarkWriteBoth(b *testing.B) {
	data := make([]byte, 4<<20)
	b.Run("sha256x2", func(b *testing.B) {
		x, y := New(), New()
		y.Write(data[:17])
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			WriteBoth(x, y, data)
		}
	})
	b.Run("crypto-sha256-twice", func(b *testing.B) {
		x, y := sha256.New(), sha256.New()
		y.Write(data[:17])
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			x.Write(data)
			y.Write(data)
		}
	})
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	var s strings.Builder
	for _, c := range b {
		s.WriteByte(digits[c>>4])
		s.WriteByte(digits[c&15])
	}
	return s.String()
}
