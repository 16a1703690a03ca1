package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// The worked example of docs/format.md §3.4, pinned byte for byte against the document
// itself: a BF16 tensor of 1024 elements (element k is the bytes k mod 256, 0x3f) stored whole,
// then the same tensor with element 100 one ULP up and 700 one down, stored as a delta. The objects are
// the ones a Commit writes; every dump line the document shows in full must be their bytes at
// that offset, and the sizes it states must be theirs. If the object format or the codec's
// output changes, the document must change with it.

// docObjectDump is one hex dump of §3.4: its lines, offset -> bytes (lines the document
// elides, with "..", are left out).
type docObjectDump map[int64][]byte

// docDumpLine is a dump line: an 8-digit offset, then up to 16 hex bytes in two groups.
var docDumpLine = regexp.MustCompile(`^([0-9a-f]{8})  ((?:[0-9a-f]{2} {1,2}){0,15}[0-9a-f]{2})(?:\s|$)`)

// docFormatSection returns the text of docs/format.md from the heading that starts with
// from to the next heading that starts with to.
func docFormatSection(t *testing.T, from, to string) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, from)
	if i < 0 {
		t.Fatalf("docs/format.md has no %q", from)
	}
	j := strings.Index(s[i:], to)
	if j < 0 {
		t.Fatalf("docs/format.md has no %q after %q", to, from)
	}
	return s[i : i+j]
}

// docDumps parses the fenced hex dumps of a section, in order.
func docDumps(t *testing.T, section string) []docObjectDump {
	t.Helper()
	var dumps []docObjectDump
	for i, block := range strings.Split(section, "```") {
		if i%2 == 0 {
			continue // outside a fence
		}
		d := docObjectDump{}
		for _, line := range strings.Split(block, "\n") {
			m := docDumpLine.FindStringSubmatch(line)
			if m == nil || strings.Contains(line[10:min(len(line), 60)], "..") {
				continue
			}
			off, _ := strconv.ParseInt(m[1], 16, 64)
			b, err := hex.DecodeString(strings.ReplaceAll(m[2], " ", ""))
			if err != nil {
				t.Fatalf("dump line %q: %v", line, err)
			}
			d[off] = b
		}
		dumps = append(dumps, d)
	}
	return dumps
}

func TestDocObjectExample(t *testing.T) {
	const elems = 1024
	v1 := make([]byte, 2*elems)
	for k := range elems {
		v1[2*k], v1[2*k+1] = byte(k%256), 0x3f
	}
	v2 := bytes.Clone(v1)
	// Element 100 one ULP up, element 700 one down (the values are positive bf16 numbers, so
	// a ULP is one step of the raw bits).
	binary.LittleEndian.PutUint16(v2[200:], binary.LittleEndian.Uint16(v2[200:])+1)
	binary.LittleEndian.PutUint16(v2[1400:], binary.LittleEndian.Uint16(v2[1400:])-1)
	s, _ := newStore(t, Options{})
	for i, data := range [][]byte{v1, v2} {
		commitTree(t, s, uint64(i+1), map[string][]byte{"model.safetensors": safetensorsFile(t,
			testTensor{"w", delta.DTypeBF16, []int64{elems}, data})})
	}
	objectFile := func(content []byte) []byte {
		t.Helper()
		id := ID(sha256.Sum256(content))
		b, err := storedObject(s, id)
		if err != nil {
			t.Fatalf("object %s: %v", id, err)
		}
		return b
	}
	whole, diff := objectFile(v1), objectFile(v2)

	section := docFormatSection(t, "#### 3.4 Worked example", "#### 3.5 Packs")
	prose := strings.Join(strings.Fields(section), " ") // the sentences, whatever their line breaks
	for _, want := range []string{
		"stored whole, is a " + strconv.Itoa(len(whole)) + "-byte file",
		"it is stored as a " + strconv.Itoa(len(diff)) + "-byte delta object",
		"element k is the bytes `k mod 256, 0x3f`",
		"changes element 100 one ULP up and element 700 one ULP down",
	} {
		if !strings.Contains(prose, want) {
			t.Errorf("docs/format.md §3.4 lacks %q", want)
		}
	}
	if !bytes.Equal(whole[0x30:0x50], make([]byte, 32)) { // "32 zero bytes: no base"
		t.Errorf("whole object: base % x, want 32 zero bytes", whole[0x30:0x50])
	}
	dumps := docDumps(t, section)
	if len(dumps) != 2 {
		t.Fatalf("docs/format.md §3.4 has %d hex dumps, want 2", len(dumps))
	}
	for i, c := range []struct {
		what  string
		file  []byte
		lines int // dump lines shown in full
	}{{"whole object", whole, 6}, {"delta object", diff, 10}} {
		d := dumps[i]
		if len(d) != c.lines {
			t.Errorf("%s: the document shows %d full lines, want %d", c.what, len(d), c.lines)
		}
		for off, want := range d {
			if off+int64(len(want)) > int64(len(c.file)) {
				t.Errorf("%s: dump line at %08x runs past the file's %d bytes", c.what, off, len(c.file))
				continue
			}
			if got := c.file[off : off+int64(len(want))]; !bytes.Equal(got, want) {
				t.Errorf("%s at %08x:\n got % x\nwant % x", c.what, off, got, want)
			}
		}
	}
}
