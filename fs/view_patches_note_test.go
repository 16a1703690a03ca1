package fs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// TestPatchInNoteIsTheLastRefusal: the note a refused close leaves is the one its writer
// reads right after close(2) returns, also when the refusal is quick and the kernel still
// holds the entry of the previous note (a zero entry timeout is only checked at the next
// jiffy): patches refused one after another, each for another reason, each read back at once.
func TestPatchInNoteIsTheLastRefusal(t *testing.T) {
	st := newEmptyStore(t)
	v1 := map[string][]byte{"model.safetensors": viewSafetensors(t, viewTensor{"w", []int64{64}, pattern(1, 128)})}
	dir := t.TempDir()
	for p, b := range v1 {
		writeFile(t, filepath.Join(dir, p), b)
	}
	if _, err := st.Commit(dir, store.CommitOptions{Version: 1}); err != nil {
		t.Fatal(err)
	}
	mnt, _ := mountTest(t, FromStore(st), Options{})
	target := filepath.Join(mnt, "patches", PatchName(2))
	var prev []byte
	for i := 0; i < 40; i++ {
		// Not a patch at all: refused at once, each with its own bytes in the reason.
		junk := []byte(fmt.Sprintf("junk %d, not a safetensors file", i))
		f, err := os.Create(target)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(junk); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err == nil {
			t.Fatalf("round %d: close of junk written as a patch succeeded", i)
		}
		note, err := os.ReadFile(target + rejectedSuffix)
		if err != nil {
			t.Fatalf("round %d: the note: %v", i, err)
		}
		refusedAt := bytes.Index(note, []byte("refused at"))
		if refusedAt < 0 || !strings.Contains(string(note), "nothing sealed") {
			t.Fatalf("round %d: note %q", i, note)
		}
		if i > 0 && bytes.Equal(note, prev) {
			t.Fatalf("round %d: the note read after the refusal is the previous one: %q", i, note)
		}
		prev = note
	}
}
