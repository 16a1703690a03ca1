package store

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestDocPartExample pins the worked example of docs/format.md §9 against the document
// itself: the JSON it shows is what a rank stores for config.json, and the record's length,
// header and CRC are what encodePart makes of it.
func TestDocPartExample(t *testing.T) {
	s, _ := newStore(t, Options{})
	w, err := s.NewVersion(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("config.json", bytes.NewReader([]byte("{}\n")), 3, 0o644); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	f := *w.files["config.json"]
	size := w.created[f.ID]
	w.mu.Unlock()
	w.Abort()
	rec := &partRecord{Group: "train", Version: 2, Rank: 1, Ranks: 2, Base: 1, Writer: "node7 pid 4242", Dirs: []manifestDir{},
		Files: []manifestFile{f}, Objects: []partObject{{ID: f.ID, Size: size}}}
	data, err := encodePart(rec)
	if err != nil {
		t.Fatal(err)
	}
	section := docFormatSection(t, "### 9. Writer groups", "# Part II")
	var shown string
	for i, block := range strings.Split(section, "```") {
		if i%2 == 1 && strings.HasPrefix(strings.TrimSpace(block), `{"group"`) {
			shown = strings.TrimSpace(block)
		}
	}
	js := data[partHeadLen : len(data)-4]
	if shown != string(js) {
		t.Fatalf("docs/format.md §9 shows the JSON\n%s\nthe rank stores\n%s", shown, js)
	}
	var back partRecord
	if err := json.Unmarshal([]byte(shown), &back); err != nil {
		t.Fatal(err)
	}
	prose := strings.Join(strings.Fields(section), " ")
	for _, want := range []string{
		"stored whole as a " + strconv.FormatInt(size, 10) + "-byte object",
		"The JSON (" + strconv.Itoa(len(js)) + " bytes",
		"is a " + strconv.Itoa(len(data)) + "-byte file (16 + " + strconv.Itoa(len(js)) + " + 4)",
	} {
		if !strings.Contains(prose, want) {
			t.Errorf("docs/format.md §9 lacks %q", want)
		}
	}
	dumps := docDumps(t, section)
	var lines docObjectDump
	for _, d := range dumps {
		if len(d) > 0 {
			lines = d
		}
	}
	if len(lines) != 3 {
		t.Fatalf("docs/format.md §9: %d full dump lines, want 3", len(lines))
	}
	for off, b := range lines {
		if int(off)+len(b) > len(data) || !bytes.Equal(data[off:int(off)+len(b)], b) {
			t.Errorf("dump line at %#x: % x, the record has % x", off, b, data[off:min(len(data), int(off)+len(b))])
		}
	}
	if _, err := decodePart(data, recordKey{"train", 2, 1, recordPart}); err != nil {
		t.Fatal(err)
	}
}
