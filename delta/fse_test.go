package delta

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/fse"
)

// fseReference decodes an FSE stream the way the block decoder's reference path does (the
// library), accepting it only if it decodes to exactly count symbols.
func fseReference(src []byte, count int) ([]byte, error) {
	s := fse.Scratch{DecompressLimit: count + 1}
	out, err := fse.Decompress(src, &s)
	if err != nil {
		return nil, err
	}
	if len(out) != count {
		return nil, errors.New("wrong symbol count")
	}
	return out, nil
}

// checkFSEAgrees requires the fast decoder to accept what the library accepts, decoding it
// to the same bytes, and to refuse what the library refuses.
func checkFSEAgrees(t *testing.T, d *fseDecoder, src []byte, count int) {
	t.Helper()
	want, werr := fseReference(src, count)
	got := make([]byte, count)
	gerr := d.decode(got, src)
	switch {
	case werr == nil && gerr != nil:
		t.Fatalf("%d symbols from %x: the library decodes them, the fast decoder says %v", count, src, gerr)
	case werr != nil && gerr == nil:
		t.Fatalf("%d symbols from %x: the library refuses them (%v), the fast decoder decodes %x", count, src, werr, got)
	case werr == nil && !bytes.Equal(got, want):
		t.Fatalf("%d symbols from %x: fast %x, library %x", count, src, got, want)
	}
}

// fseSamples are symbol strings of the shapes the encoder meets: value symbols of RL steps
// (one or two codes nearly always), flat, few and many symbols, short and long.
func fseSamples(rng *rand.Rand) map[string][]byte {
	draw := func(n int, pick func() byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = pick()
		}
		return b
	}
	rlStep := func() byte { // zigzag codes: +-1 ULP mostly, then +-2, +-3, rarely large
		switch r := rng.Float64(); {
		case r < 0.44:
			return 1
		case r < 0.88:
			return 2
		case r < 0.97:
			return byte(3 + rng.IntN(2))
		case r < 0.995:
			return byte(5 + rng.IntN(20))
		default:
			return byte(25 + rng.IntN(231))
		}
	}
	return map[string][]byte{
		"rl step 10k":       draw(10000, rlStep),
		"rl step 37":        draw(37, rlStep),
		"rl step 9":         draw(9, rlStep),
		"rl step 100k":      draw(100000, rlStep),
		"one dominant":      draw(5000, func() byte { return map[bool]byte{true: 7, false: byte(rng.IntN(256))}[rng.Float64() < 0.95] }),
		"flat 256":          draw(20000, func() byte { return byte(rng.IntN(256)) }),
		"flat 5":            draw(3000, func() byte { return byte(rng.IntN(5)) }),
		"two symbols":       draw(777, func() byte { return byte(1 + rng.IntN(2)) }),
		"geometric":         draw(4096, func() byte { return byte(min(255, int(rng.ExpFloat64()*3))) }),
		"sparse high codes": draw(2000, func() byte { return byte(200 + rng.IntN(3)*20) }),
	}
}

// TestFSEDecoderMatchesLibrary decodes the library's streams of many shapes and table sizes
// with both decoders, then damaged copies of them (bits flipped, bytes cut off, counts off
// by one), and requires the same result every time.
func TestFSEDecoderMatchesLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	d := new(fseDecoder)
	for name, symbols := range fseSamples(rng) {
		for _, tableLog := range []uint8{0, 5, 6, 8, 9, 11, 12} {
			var sc fse.Scratch
			sc.TableLog = tableLog
			src, err := fse.Compress(symbols, &sc)
			if err != nil {
				continue // incompressible or a single symbol: stored otherwise
			}
			src = bytes.Clone(src)
			got := make([]byte, len(symbols))
			if err := d.decode(got, src); err != nil || !bytes.Equal(got, symbols) {
				t.Fatalf("%s, table log %d: %v, bytes equal %v", name, tableLog, err, bytes.Equal(got, symbols))
			}
			checkFSEAgrees(t, d, src, len(symbols)-1)
			checkFSEAgrees(t, d, src, len(symbols)+1)
			for range 40 {
				bad := bytes.Clone(src)
				switch rng.IntN(3) {
				case 0:
					i := rng.IntN(len(bad))
					bad[i] ^= 1 << rng.IntN(8)
				case 1:
					bad = bad[:rng.IntN(len(bad))]
				default:
					i := rng.IntN(min(len(bad), 12)) // the header
					bad[i] = byte(rng.IntN(256))
				}
				checkFSEAgrees(t, d, bad, len(symbols))
			}
		}
	}
}

func FuzzFSEDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, symbols := range fseSamples(rng) {
		if len(symbols) > 5000 {
			continue
		}
		if src, err := fse.Compress(symbols, &fse.Scratch{}); err == nil {
			f.Add(bytes.Clone(src), uint16(len(symbols)))
		}
	}
	f.Add([]byte{0, 0, 0, 0, 1}, uint16(3))
	d := new(fseDecoder)
	f.Fuzz(func(t *testing.T, src []byte, count uint16) {
		checkFSEAgrees(t, d, src, int(count))
	})
}

// BenchmarkFSEDecode compares the two decoders on the value symbols of RL steps.
func BenchmarkFSEDecode(b *testing.B) {
	symbols := fseSamples(rand.New(rand.NewPCG(1, 1)))["rl step 10k"]
	src, err := fse.Compress(symbols, &fse.Scratch{})
	if err != nil {
		b.Fatal(err)
	}
	src = bytes.Clone(src)
	b.Run("library", func(b *testing.B) {
		b.SetBytes(int64(len(symbols)))
		s := fse.Scratch{DecompressLimit: len(symbols) + 1}
		for range b.N {
			if _, err := fse.Decompress(src, &s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(len(symbols)))
		d, out := new(fseDecoder), make([]byte, len(symbols))
		for range b.N {
			if err := d.decode(out, src); err != nil {
				b.Fatal(err)
			}
		}
	})
}
