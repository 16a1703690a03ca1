package store

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// TestPackCopiesFallback: the record that serves an object (the index of the highest
// sequence number's) is damaged, and the object's loose file is gone: the pack layer reads
// it from its record in another pack, says so once at WARN (object, damaged pack), and
// verify reports the damaged record but not the object. With the other record damaged too,
// the object is damaged.
func TestPackCopiesFallback(t *testing.T) {
	f := newPackedFixture(t)
	e := f.entries[0][0]
	id := ID(e.ID)
	b, err := os.ReadFile(f.lb.ObjectPath(id))
	if err != nil {
		t.Fatal(err)
	}
	// A second record of the object, in a pack of its own, indexed with sequence number 3:
	// it wins the map.
	pid, ents := f.addSecondRecord(t, e.ID, b)
	if err := os.Remove(f.lb.ObjectPath(id)); err != nil {
		t.Fatal(err)
	}
	rewriteFile(t, f.lb.PackPath(ID(pid)), flipAt(func(int) int { return int(ents[0].Offset + ents[0].Length/2) }))

	po := f.s.be.Backend.(*packedObjects)
	var mu sync.Mutex
	var lines []string
	po.log = logtest.New(func(format string, a ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(format, a...))
		mu.Unlock()
	})
	if err := po.reload(); err != nil {
		t.Fatal(err)
	}
	if loc, ok := po.locate(id); !ok || loc.Pack != ID(pid) {
		t.Fatalf("object served from %+v, %v; want pack %s", loc, ok, pid)
	}
	for range 2 {
		if _, err := f.s.checker.checkObject(id); err != nil {
			t.Fatalf("check of an object whose other record is intact: %v", err)
		}
	}
	warned := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "WARN damaged record of an object: read from its record in another pack") &&
			strings.Contains(l, "object="+id.String()) && strings.Contains(l, "damaged pack="+ID(pid).String()) {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d warnings of the fallback, want 1:\n%s", warned, strings.Join(lines, "\n"))
	}
	rep, err := f.s.Verify(nil)
	if !errors.Is(err, ErrCorrupt) || len(rep.Damaged) != 0 || len(rep.Packs.Damaged) != 1 || rep.Packs.Damaged[0].Object != id || rep.Packs.Damaged[0].Pack != ID(pid) {
		t.Errorf("verify: %v, damaged %v, in packs %v; want the record of %s in pack %s only", err, rep.Damaged, rep.Packs.Damaged, id, pid)
	}

	// Both records damaged, no loose file: the object is damaged.
	rewriteFile(t, f.packPath(0), flipAt(func(int) int { return int(e.Offset + e.Length/2) }))
	po.forgetDamage()
	f.s.objects.forgetCopy(id)
	if _, err := f.s.checker.checkObject(id); !errors.Is(err, ErrCorrupt) || errors.Is(err, errOtherCopy) {
		t.Errorf("check with every copy damaged: %v; want ErrCorrupt", err)
	}
	expectDamage(f.s)
}
