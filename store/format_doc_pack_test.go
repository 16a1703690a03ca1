package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/store/pack"
)

// The worked examples of docs/format.md §3.5 and §3.6, pinned byte for byte against the
// document itself: the two objects of §3.4 (as a commit of its two versions writes them), the
// whole one first, in one pack, and an index of that pack alone with sequence number 1. Every
// dump line the document shows in full must be their bytes at that offset, and the sizes and
// names it states must be theirs. If the pack or index format changes, the document must
// change with it.
func TestDocPackExample(t *testing.T) {
	const elems = 1024
	v1 := make([]byte, 2*elems)
	for k := range elems {
		v1[2*k], v1[2*k+1] = byte(k%256), 0x3f
	}
	v2 := bytes.Clone(v1)
	binary.LittleEndian.PutUint16(v2[200:], binary.LittleEndian.Uint16(v2[200:])+1)
	binary.LittleEndian.PutUint16(v2[1400:], binary.LittleEndian.Uint16(v2[1400:])-1)
	s, _ := newStore(t, Options{})
	for i, data := range [][]byte{v1, v2} {
		commitTree(t, s, uint64(i+1), map[string][]byte{"model.safetensors": safetensorsFile(t,
			testTensor{"w", delta.DTypeBF16, []int64{elems}, data})})
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "pack"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pack.NewWriter(f)
	for _, content := range [][]byte{v1, v2} {
		id := ID(sha256.Sum256(content))
		rec, err := storedObject(s, id)
		if err != nil {
			t.Fatalf("object %s: %v", id, err)
		}
		if err := w.Add(id, rec); err != nil {
			t.Fatal(err)
		}
	}
	packID, size, entries, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	packFile, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if _, id, err := pack.ReadTrailer(bytes.NewReader(packFile), size); err != nil || id != packID {
		t.Fatalf("the example pack does not read back: %v", err)
	}
	index := (&pack.Index{Seq: 1, Packs: []pack.IndexedPack{{ID: packID, Size: size, Entries: entries}}}).Encode()
	if _, err := pack.DecodeIndex(index); err != nil {
		t.Fatalf("the example index does not decode: %v", err)
	}
	indexName := pack.Name(1, index)
	packName := ID(packID).String()

	for _, c := range []struct {
		what, from, to string
		file           []byte
		lines          int // dump lines shown in full
		prose          []string
	}{
		{"§3.5 pack", "#### 3.5 Packs", "#### 3.6", packFile, 12, []string{
			"make a " + strconv.Itoa(len(packFile)) + "-byte pack",
			"`packs/" + packName[:2] + "/" + packName + "`",
			"the table of two entries at 537 and the footer at 641",
		}},
		{"§3.6 index", "#### 3.6 Pack indexes", "### 4. Manifests", index, 6, []string{
			"is " + strconv.Itoa(len(index)) + " bytes, stored as `index/" + indexName + "`",
			"bytes: `" + indexName + "`",
		}},
	} {
		section := docFormatSection(t, c.from, c.to)
		prose := strings.Join(strings.Fields(section), " ")
		for _, want := range c.prose {
			if !strings.Contains(prose, want) {
				t.Errorf("docs/format.md %s lacks %q", c.what, want)
			}
		}
		dumps := docDumps(t, section)
		d := dumps[len(dumps)-1] // the worked example is the section's last dump
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
		// The dump ends with the file's last bytes.
		var last int64
		for off, b := range d {
			last = max(last, off+int64(len(b)))
		}
		if last != int64(len(c.file)) {
			t.Errorf("%s: the dump ends at %d, the file at %d", c.what, last, len(c.file))
		}
	}
}
