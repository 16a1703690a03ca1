package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"io"
	"math/rand/v2"
	"testing"
)

// objectFile reads the whole file of object id.
func objectFile(t testing.TB, s *Store, id ID) []byte {
	t.Helper()
	f, err := s.be.OpenObject(id)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

// TestObjStreamMatchesFullWriter writes the same contents with the batch path's fullWriter
// (the reference) and with objStream, its length known or not: the object files must be
// identical, and readAt must give back the content at every stage.
func TestObjStreamMatchesFullWriter(t *testing.T) {
	a, _ := newStore(t, Options{})
	b, _ := newStore(t, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	link := []byte("not a real delta, but bytes to carry")
	for _, size := range []int{0, 2, 100, 1 << 20, 1<<20 + 2, 3<<20 + 6} {
		for _, width := range []int{1, 2} {
			for _, known := range []bool{true, false} {
				for _, withLink := range []bool{false, true} {
					name := fmt.Sprintf("%d bytes, width %d, known %v, link %v", size, width, known, withLink)
					content := bf16Like(rng, size/2)
					var base ID
					var l []byte
					if withLink {
						base, l = IDOf([]byte("base")), link
					}
					fw, err := newFullWriter(a.be, a.codec, width, int64(size))
					if err != nil {
						t.Fatal(err)
					}
					fw.Write(content)
					id, err := fw.finish(ID{}, base, l)
					if err != nil {
						t.Fatal(err)
					}
					if err := fw.put(id); err != nil {
						t.Fatal(err)
					}
					clen := int64(size)
					if !known {
						clen = -1
					}
					o, err := newObjStream(b, width, clen, true)
					if err != nil {
						t.Fatal(err)
					}
					for rest := content; len(rest) > 0; {
						n := min(len(rest), width*(1+rng.IntN(400_000)))
						if err := o.write(rest[:n]); err != nil {
							t.Fatal(err)
						}
						rest = rest[n:]
						got := make([]byte, len(content)-len(rest))
						if err := o.readAt(got, 0); err != nil {
							t.Fatalf("%s: read back: %v", name, err)
						}
						mustEqualBytes(t, name+" read back", got, content[:len(got)])
					}
					if o.sum() != id {
						t.Fatalf("%s: objStream hashes %s, fullWriter %s", name, o.sum(), id)
					}
					if _, err := o.finish(id, base, l); err != nil {
						t.Fatal(err)
					}
					mustEqualBytes(t, name, objectFile(t, b, id), objectFile(t, a, id))
					a.be.DeleteObject(id)
					b.be.DeleteObject(id)
				}
			}
		}
	}
}

// fuzzStore is a store with one sealed version whose tensors are bases for the fuzzed files.
func fuzzStore(f *testing.F) *Store {
	s, _ := newStore(f, Options{MaxChain: 2, Logger: logtest.New(func(string, ...any) {})})
	sealBatch(f, s, 1, map[string][]byte{"f": safetensorsFile(f,
		testTensor{"a", "F32", []int64{4}, []byte("0123456789abcdef")},
		testTensor{"b", "BF16", []int64{8}, []byte("ABCDEFGHIJKLMNOP")})})
	return s
}

// FuzzStreamMatchesBatch feeds any bytes, split anywhere, to a stream and to AddFile: the
// manifest entries must be the same (and nothing may panic).
func FuzzStreamMatchesBatch(f *testing.F) {
	f.Add(safetensorsFile(f, testTensor{"a", "F32", []int64{4}, []byte("0123456789abcdeX")},
		testTensor{"b", "BF16", []int64{8}, []byte("ABCDEFGHIJKLMNOQ")}), uint64(1))
	f.Add(safetensorsFile(f, testTensor{"a", "F32", []int64{4}, []byte("0123456789abcdef")}), uint64(2))
	f.Add(rawSafetensors(`{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}`, []byte("12345678xyz")), uint64(3))
	f.Add(rawSafetensors(`{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}`, []byte("1234")), uint64(4))
	f.Add(rawSafetensors(`{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}`, []byte("12345678")), uint64(5))
	f.Add([]byte(`{"not": "safetensors"}`), uint64(6))
	f.Add([]byte{}, uint64(7))
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' '}, uint64(8))
	s := fuzzStore(f)
	v := uint64(2)
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		entry := func(stream bool) string {
			w, err := s.NewVersion(v)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			if stream {
				st, err := w.StreamFile("f")
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(seed, 1))
				for rest := data; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(40))
					if _, err := st.Write(rest[:n]); err != nil {
						t.Fatal(err)
					}
					rest = rest[n:]
				}
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				if err := w.AddStream("f", st, 0o644); err != nil {
					t.Fatal(err)
				}
			} else if err := w.AddFile("f", bytes.NewReader(data), int64(len(data)), 0o644); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(w.files["f"])
			return string(b)
		}
		if batch, stream := entry(false), entry(true); batch != stream {
			t.Fatalf("entries differ:\nbatch:  %s\nstream: %s", batch, stream)
		}
	})
}

// FuzzClassifyHeader checks the stream's guess of a header against the batch rule: when it
// says safetensors of size S, the batch path agrees for S and for no other size; and that
// the guess equals the reference's (classifyHeaderReference).
func FuzzClassifyHeader(f *testing.F) {
	f.Add(rawSafetensors(`{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}`, nil))
	f.Add(rawSafetensors(`{"__metadata__": {"x": "y"}, "a": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}`, nil))
	f.Add(rawSafetensors(`{}`, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Add(binary.LittleEndian.AppendUint64(nil, 4))
	f.Fuzz(func(t *testing.T, prefix []byte) {
		need := headerNeed(prefix)
		if need < 0 || int64(len(prefix)) < need {
			return
		}
		classifyAgree(t, prefix)
		class, hdr, size := classifyHeader(prefix[:need])
		if class != classSafetensors {
			return
		}
		if hdr.DataStart() != need {
			t.Fatalf("header of %d bytes, parsed as %d", need, hdr.DataStart())
		}
		if !batchIsSafetensors(prefix, size) {
			t.Fatalf("classified as safetensors of %d bytes; the batch rule disagrees", size)
		}
		for _, other := range []int64{size - 1, size + 1, size + 8} {
			if other >= 0 && batchIsSafetensors(prefix, other) {
				t.Fatalf("the batch rule also accepts %d bytes, not only %d", other, size)
			}
		}
	})
}
