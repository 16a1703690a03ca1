package s3

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// TestS3GCRecord: on S3 too, gc records what it drops (PREFIX/dropped), so a store whose gc
// dropped middle versions verifies clean, and a lost manifest whose next version holds only
// anchors (MaxChain 1: versions 3, 5 and 7) is named. Versions: 1..7; gc keeps 3 (a
// milestone), 5, 6 and 7 and drops 1, 2 and 4; then the manifest of 6 is deleted.
func TestS3GCRecord(t *testing.T) {
	_, url := startInitialized(t)
	w := openTestStore(t, url, store.Options{MaxChain: 1})
	m := newTestModel(11, 60_000, 30_000)
	for v := uint64(1); v <= 7; v++ {
		if v > 1 {
			m.step()
		}
		commitTree(t, w, v, m.files(t))
	}
	st, err := w.GCWith(3, store.GCOptions{KeepEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(st.Dropped); got != "[1 2 4]" {
		t.Fatalf("gc dropped %v, want 1, 2 and 4", st.Dropped)
	}
	c, err := setup(url, Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := c.getBytes(ctx, c.loc.key(store.GCRecordName), nil); err != nil {
		t.Fatalf("no gc record in the bucket after gc: %v", err)
	}
	r := openTestStore(t, url, store.Options{ReadOnly: true})
	if rep, err := r.Verify(nil); err != nil || len(rep.Notes) > 0 {
		t.Fatalf("verify after gc dropped 1, 2 and 4: %v, notes %q", err, rep.Notes)
	}
	if err := c.remove(ctx, c.loc.key("versions/"+store.ManifestName(6))); err != nil {
		t.Fatal(err)
	}
	r2 := openTestStore(t, url, store.Options{ReadOnly: true})
	rep, err := r2.Verify(nil)
	if !errors.Is(err, store.ErrCorrupt) || len(rep.Damaged) != 1 || rep.Damaged[0].Version != 6 || !strings.Contains(rep.Damaged[0].Err.Error(), "manifest lost") {
		t.Fatalf("verify after the manifest of v6 was deleted: %v, %v", err, rep.Damaged)
	}
	// The lost manifest stays damage for every later Verify (the cleanup's, too).
	w.Close()
	r.Close()
	r2.Close()
}
