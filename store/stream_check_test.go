package store

import (
	"crypto/sha256"
	"math/rand/v2"
	"testing"
)

// TestStreamBaseCheck: bytes checked by the copy need no hash; from the first that were not,
// the whole base is hashed (the bytes before read again from the objects) and must be the
// base's content; bytes read a second time are compared with those read first.
func TestStreamBaseCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	content := randomBytes(rng, 3*ingestChunk+1234)
	base := ID(sha256.Sum256(content))
	m := &materialized{} // no CRCs known: the hash is SHA-256
	wrong := append([]byte(nil), content...)
	wrong[100] ^= 1
	objects := func(src []byte) func(off, n int64, p []byte) error {
		return func(off, n int64, p []byte) error { copy(p, src[off:off+n]); return nil }
	}
	// read feeds the base in chunks of ingestChunk; checked says which came from the copy.
	read := func(c *streamBaseCheck, data []byte, checked func(i int) bool, from []byte) {
		t.Helper()
		for i, off := 0, 0; off < len(data); i, off = i+1, off+ingestChunk {
			b := data[off:min(off+ingestChunk, len(data))]
			if err := c.add(b, int64(off), checked(i), objects(from)); err != nil {
				t.Fatal(err)
			}
		}
	}
	all := func(int) bool { return true }
	none := func(int) bool { return false }
	fromThird := func(i int) bool { return i < 2 }

	for _, tc := range []struct {
		name          string
		checked       func(int) bool
		data, objects []byte
		want          bool
	}{
		{"all checked by the copy", all, content, content, true},
		{"none checked", none, content, content, true},
		{"none checked, damaged", none, wrong, content, false},
		{"checked, then the objects", fromThird, content, content, true},
		{"checked, then the objects, which are damaged before", fromThird, content, wrong, false},
	} {
		c := newStreamBaseCheck(m, base)
		read(c, tc.data, tc.checked, tc.objects)
		if got := c.matches(); got != tc.want {
			t.Errorf("%s: matches %v, want %v", tc.name, got, tc.want)
		}
	}

	// Read twice.
	first := newStreamBaseCheck(m, base)
	read(first, content, all, content)
	again := first.again()
	read(again, content, all, content)
	if same, known := first.sameAs(again); !same || !known {
		t.Errorf("checked twice: same %v known %v", same, known)
	}
	again = first.again()
	read(again, content, fromThird, content)
	if _, known := first.sameAs(again); known {
		t.Error("checked first, partly hashed again: known, want the whole base checked instead")
	}
	first = newStreamBaseCheck(m, base)
	read(first, content, fromThird, content)
	for _, tc := range []struct {
		data []byte
		want bool
	}{{content, true}, {wrong, false}} {
		again := first.again()
		read(again, tc.data, all, content) // hashed from the start, like first
		if same, known := first.sameAs(again); !known || same != tc.want {
			t.Errorf("hashed first, read again (want same %v): same %v known %v", tc.want, same, known)
		}
	}
}
