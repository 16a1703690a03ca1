package store

import (
	"bytes"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCRC32Combine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ a, b int }{{0, 0}, {0, 5}, {5, 0}, {1, 1}, {96, 1 << 20}, {1000, 3}, {7, 12345}, {3, 1<<16 + 1}, {64, 3<<20 + 77}} {
		a, b := randomBytes(rng, tc.a), randomBytes(rng, tc.b)
		want := crc32.Checksum(append(append([]byte(nil), a...), b...), castagnoli)
		if got := crc32Combine(crc32c(a), crc32c(b), int64(len(b))); got != want {
			t.Errorf("combine(%d, %d bytes) = %08x, want %08x", tc.a, tc.b, got, want)
		}
	}
}

func TestShuffleMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, width := range []int{1, 2, 4, 8} {
		for _, n := range []int{0, 1, 7, 1000} {
			src := randomBytes(rng, n*width)
			fast, ref := make([]byte, len(src)), make([]byte, len(src))
			shuffleBytes(fast, src, width)
			shuffleReference(ref, src, width)
			if !bytes.Equal(fast, ref) {
				t.Fatalf("shuffle width %d, %d elements: fast path differs from the reference", width, n)
			}
			back, refBack := make([]byte, len(src)), make([]byte, len(src))
			unshuffleBytes(back, fast, width)
			unshuffleReference(refBack, ref, width)
			if !bytes.Equal(back, src) || !bytes.Equal(refBack, src) {
				t.Fatalf("unshuffle width %d, %d elements does not invert the shuffle", width, n)
			}
		}
	}
	// The definition: byte j of element i goes to j*n+i.
	got := make([]byte, 6)
	shuffleBytes(got, []byte{1, 2, 3, 4, 5, 6}, 2)
	if !bytes.Equal(got, []byte{1, 3, 5, 2, 4, 6}) {
		t.Fatalf("shuffle of 1..6 at width 2 = %v", got)
	}
}

func TestFullObjectRoundTrip(t *testing.T) {
	s, _ := newStore(t, Options{})
	expectDamage(s) // the links written below are not real deltas, and Verify says so
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		name  string
		width int
		size  int
		link  bool
	}{
		{"empty", 1, 0, false},
		{"one byte", 1, 1, false},
		{"bf16 exact chunk", 2, fullChunkSize, false},
		{"bf16 chunk and a bit", 2, fullChunkSize + 2, false},
		{"f32 three chunks", 4, 3*fullChunkSize - 4, true},
		{"f64", 8, 8000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content := randomBytes(rng, tc.size)
			fw, err := newFullWriter(s.be, s.codec, tc.width, int64(tc.size))
			if err != nil {
				t.Fatal(err)
			}
			// Uneven writes exercise the chunk accumulation.
			for rest := content; len(rest) > 0; {
				n := min(len(rest), 1+rng.IntN(fullChunkSize+1000))
				if _, err := fw.Write(rest[:n]); err != nil {
					t.Fatal(err)
				}
				rest = rest[n:]
			}
			var base ID
			var link []byte
			if tc.link {
				base, link = IDOf([]byte("base")), []byte("not a real delta")
			}
			id, err := fw.finish(ID{}, base, link)
			if err != nil {
				t.Fatal(err)
			}
			if id != IDOf(content) {
				t.Fatalf("identity %s, want the SHA-256 of the content", id)
			}
			if err := fw.put(id); err != nil {
				t.Fatal(err)
			}
			f, info, err := s.objects.openObject(id)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := checkCRC(f); err != nil {
				t.Fatalf("CRC of a fresh object: %v", err)
			}
			if info.hdr.Kind != kindFull || info.hdr.Width != tc.width || info.hdr.ContentLen != int64(tc.size) || info.hdr.DeltaLen != int64(len(link)) || info.hdr.Base != base {
				t.Fatalf("header %+v", info.hdr)
			}
			got := make([]byte, tc.size)
			if err := s.objects.readFullRange(id, 0, got); err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, "whole content", got, content)
			for i := 0; i < 20 && tc.size > 0; i++ {
				off := rng.IntN(tc.size)
				n := rng.IntN(tc.size - off + 1)
				part := make([]byte, n)
				if err := s.objects.readFullRange(id, int64(off), part); err != nil {
					t.Fatal(err)
				}
				mustEqualBytes(t, "range", part, content[off:off+n])
			}
		})
	}
}

func TestFullWriterRefusesWrongLength(t *testing.T) {
	s, _ := newStore(t, Options{})
	fw, err := newFullWriter(s.be, s.codec, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer fw.abort()
	if _, err := fw.Write(make([]byte, 12)); err == nil {
		t.Fatal("write past the announced length accepted")
	}
	fw.Write(make([]byte, 8))
	if _, err := fw.finish(ID{}, ID{}, nil); err == nil {
		t.Fatal("finish short of the announced length accepted")
	}
	if _, err := newFullWriter(s.be, s.codec, 4, 6); err == nil {
		t.Fatal("content length not a multiple of the width accepted")
	}
	fw2, _ := newFullWriter(s.be, s.codec, 1, 3)
	defer fw2.abort()
	fw2.Write([]byte("abc"))
	if _, err := fw2.finish(IDOf([]byte("abd")), ID{}, nil); err == nil {
		t.Fatal("content of another identity than the first pass saw accepted")
	}
}
