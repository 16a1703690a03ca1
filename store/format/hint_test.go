package format

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestHintFormat pins the change hint's bytes (docs/format.md Part I §4.3) and its refusals:
// the magic first, then the version, then the size and the CRC.
func TestHintFormat(t *testing.T) {
	good := EncodeHint(ChangeHint{Latest: 43, Written: 1_800_000_000_000_000_000})
	const want = "57 46 53 4c 41 54 53 54 01 00 00 00 2b 00 00 00 00 00 00 00 00 00 b4 93 76 e2 fa 18 08 ce 98 ee"
	if got := spaced(good); got != want {
		t.Fatalf("hint bytes\n got %s\nwant %s", got, want)
	}
	// The document's example is these bytes.
	doc, err := os.ReadFile("../../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "#### 4.3 The change hint")
	if !strings.Contains(section, "`"+want+"`") {
		t.Fatalf("docs/format.md Part I §4.3 does not give the example as %s", want)
	}
	h, err := ParseHint(good)
	if err != nil || h.Latest != 43 || h.Written != 1_800_000_000_000_000_000 {
		t.Fatalf("parse: %+v, %v", h, err)
	}
	flip := func(i int) []byte { b := bytes.Clone(good); b[i] ^= 1; return b }
	v2 := bytes.Clone(good)
	v2[8] = 2
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrHintMagic},
		{"other magic", append([]byte("WFSSTORE"), good[8:]...), ErrHintMagic},
		{"magic only", []byte(HintMagic), ErrHintSize},
		{"version 2", v2, ErrHintVersion},
		{"short", good[:31], ErrHintSize},
		{"long", append(bytes.Clone(good), 0), ErrHintSize},
		{"latest flipped", flip(12), ErrHintCRC},
		{"time flipped", flip(27), ErrHintCRC},
		{"crc flipped", flip(31), ErrHintCRC},
	} {
		if _, err := ParseHint(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func spaced(b []byte) string {
	s := hex.EncodeToString(b)
	var out []string
	for i := 0; i < len(s); i += 2 {
		out = append(out, s[i:i+2])
	}
	return strings.Join(out, " ")
}

// FuzzParseHint: no input panics the parser, and what it accepts encodes back to the same bytes.
func FuzzParseHint(f *testing.F) {
	f.Add(EncodeHint(ChangeHint{Latest: 1, Written: 2}))
	f.Add([]byte(HintMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHint(b)
		if err == nil && !bytes.Equal(EncodeHint(h), b) {
			t.Fatalf("accepted %x, which encodes back as %x", b, EncodeHint(h))
		}
	})
}
