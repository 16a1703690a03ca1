package delta

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// seedBodies returns valid bodies covering every symbol mode, escapes, every width and
// several blocks, for the fuzzers to mutate.
func seedBodies(tb testing.TB) [][]byte {
	rng := rand.New(rand.NewPCG(23, 24))
	var bodies [][]byte
	add := func(base, cur []byte, width int, float bool, shift uint) {
		body, err := encodeDeltaShift(nil, base, cur, width, float, shift)
		if err != nil {
			tb.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	for _, width := range []int{1, 2, 4, 8} {
		base := randomBytes(rng, 300*width)
		add(base, changeValues(rng, base, width, true, 0.1), width, true, minBlockShift) // FSE + escapes
		add(base, changeValues(rng, base, width, false, 0.9), width, false, 7)
	}
	// Repeated symbol: every change is +1.
	base := make([]byte, 2*200)
	cur := bytes.Clone(base)
	for i := 0; i < 200; i += 3 {
		cur[2*i] = 1
	}
	add(base, cur, 2, false, 8)
	// Raw symbols: a single change.
	cur = bytes.Clone(base)
	cur[10] = 0x40
	add(base, cur, 2, true, defaultBlockShift)
	// Nothing changed.
	add(base, base, 2, true, defaultBlockShift)
	return bodies
}

// FuzzDecodeDelta feeds arbitrary bytes to ParseDelta and ApplyDelta: they must never panic
// or write outside dst, must fail with the package's sentinel errors, and a body that applies
// forward must apply back to the original bytes.
func FuzzDecodeDelta(f *testing.F) {
	for _, body := range seedBodies(f) {
		f.Add(body, uint32(0), uint32(1<<20))
		f.Add(body, uint32(17), uint32(40))
		f.Add(body[:len(body)/2], uint32(0), uint32(100))
	}
	f.Fuzz(func(t *testing.T, body []byte, first, count uint32) {
		info, perr := ParseDelta(body)
		if perr != nil && !errors.Is(perr, ErrMalformed) && !errors.Is(perr, ErrUnsupportedVersion) {
			t.Fatalf("ParseDelta: unexpected error kind: %v", perr)
		}
		if perr != nil {
			if err := ApplyDelta(body, make([]byte, 8), 0, Forward); err == nil {
				t.Fatalf("ApplyDelta accepted a body ParseDelta refused (%v)", perr)
			}
			return
		}
		if info.Elements > 1<<20 {
			return // valid framing of a huge tensor: not worth the memory here
		}
		start := min(int64(first), info.Elements)
		n := min(int64(count), info.Elements-start)
		w := info.Width
		g := newGuarded(int(n), w)
		dst := g.dst
		d, oerr := OpenDelta(body)
		if oerr != nil {
			t.Fatalf("OpenDelta refused a body ParseDelta accepted: %v", oerr)
		}
		viaBlocks := bytes.Clone(dst)
		berr := applyByBlocks(d, viaBlocks, start, Forward)
		err := ApplyDelta(body, dst, start, Forward)
		if (err == nil) != (berr == nil) || (err == nil && !bytes.Equal(viaBlocks, dst)) {
			t.Fatalf("block path (%v) and ApplyDelta (%v) disagree", berr, err)
		}
		if g.writtenOutside() {
			t.Fatal("ApplyDelta wrote outside dst")
		}
		if err != nil {
			// A version-2 body without its context (FuzzDecodeDelta2 gives it one).
			if !errors.Is(err, ErrMalformed) && !(info.Version == 2 && errors.Is(err, ErrNoContext)) {
				t.Fatalf("ApplyDelta: unexpected error kind: %v", err)
			}
			return
		}
		if err := ApplyDelta(body, dst, start, Backward); err != nil {
			t.Fatalf("backward after a successful forward: %v", err)
		}
		if !g.restored() {
			t.Fatal("forward then backward did not restore the bytes")
		}
	})
}

// fuzzPair splits a fuzzer's data into a base and a new tensor of width-byte elements, and
// keeps about (255-density)/256 of the new elements equal to base, so that sparse changes are
// explored as well as dense ones.
func fuzzPair(data []byte, width int, rng *rand.Rand, density uint8) (base, cur []byte) {
	n := len(data) / 2 / width
	base = data[:n*width]
	cur = bytes.Clone(data[n*width : 2*n*width])
	for i := range n {
		if byte(rng.Uint32()) > density {
			copy(cur[i*width:(i+1)*width], base[i*width:(i+1)*width])
		}
	}
	return base, cur
}

// FuzzDeltaRoundTrip encodes arbitrary base/new pairs at every width, block size and density:
// forward must give new, backward base, and both must equal the reference on sub-ranges.
func FuzzDeltaRoundTrip(f *testing.F) {
	f.Add([]byte{}, uint8(1), uint8(0), uint64(1), uint8(128))
	f.Add(bytes.Repeat([]byte{0x3F, 0x80, 0xBF, 0x80}, 64), uint8(1), uint8(0), uint64(2), uint8(20))
	f.Add(randomBytes(rand.New(rand.NewPCG(1, 1)), 1024), uint8(0), uint8(1), uint64(3), uint8(255))
	f.Add(randomBytes(rand.New(rand.NewPCG(2, 2)), 4096), uint8(2), uint8(2), uint64(4), uint8(5))
	f.Add(randomBytes(rand.New(rand.NewPCG(3, 3)), 4096), uint8(3), uint8(5), uint64(5), uint8(60))
	f.Fuzz(func(t *testing.T, data []byte, widthSel, shiftSel uint8, seed uint64, density uint8) {
		width := 1 << (widthSel % 4)
		float := widthSel&4 != 0
		shift := uint(minBlockShift) + uint(shiftSel%6)
		if shiftSel >= 128 {
			shift = defaultBlockShift
		}
		rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
		base, cur := fuzzPair(data, width, rng, density)
		checkRoundTrip(t, rng, base, cur, width, float, shift)
	})
}

// FuzzDecodeBlock feeds arbitrary bytes straight to the block decoder, past the framing checks
// that stop most mutations of whole bodies: it must never panic, and what it accepts must keep
// its promises (count positions, ascending, inside the block; codes non-zero and within the
// width).
func FuzzDecodeBlock(f *testing.F) {
	for _, body := range seedBodies(f) {
		l, err := parseLayout(body)
		if err != nil {
			f.Fatal(err)
		}
		off := l.payloadStart()
		for b := range l.blocks {
			count, size := l.entry(b)
			if count > 0 {
				f.Add(body[off:off+int64(size)], uint32(count), uint32(l.blockLen(b)), uint8(l.Width))
			}
			off += int64(size)
		}
	}
	f.Fuzz(func(t *testing.T, payload []byte, count, blockLen uint32, widthSel uint8) {
		width := 1 << (widthSel % 4)
		// Keep the seeds' values as they are; fold others into small valid ranges.
		if blockLen == 0 || blockLen > 1<<16 {
			blockLen = 1 + blockLen%(1<<16)
		}
		if count == 0 || count > blockLen {
			count = 1 + count%blockLen
		}
		d := blockDecoder{width: width}
		err := d.decode(payload, int(count), uint64(blockLen))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(d.pos) != int(count) || len(d.codes) != int(count) {
			t.Fatalf("accepted with %d positions and %d codes for %d changes", len(d.pos), len(d.codes), count)
		}
		for i, p := range d.pos {
			if p >= blockLen || (i > 0 && p <= d.pos[i-1]) {
				t.Fatalf("position %d = %d: outside the block of %d or not ascending", i, p, blockLen)
			}
			if c := d.codes[i]; c == 0 || c > widthMask(width) {
				t.Fatalf("code %d = %#x invalid at width %d", i, c, width)
			}
		}
	})
}

// guarded is a destination of n elements of width bytes with guard bytes on both sides, which
// catch a write outside it, filled with a pattern so that a change shows.
type guarded struct{ buf, orig, dst []byte }

func newGuarded(n, width int) guarded {
	const guard = 16
	buf := make([]byte, guard+n*width+guard)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	return guarded{buf: buf, orig: bytes.Clone(buf), dst: buf[guard : guard+n*width]}
}

// writtenOutside says whether a guard byte changed.
func (g guarded) writtenOutside() bool {
	k := len(g.buf) - len(g.dst)
	lo := k / 2
	return !bytes.Equal(g.buf[:lo], g.orig[:lo]) || !bytes.Equal(g.buf[lo+len(g.dst):], g.orig[lo+len(g.dst):])
}

// restored says whether every byte is as it was made.
func (g guarded) restored() bool { return bytes.Equal(g.buf, g.orig) }
