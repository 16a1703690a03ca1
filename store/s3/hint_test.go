package s3

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/store"
)

// logLines collects a store's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logLines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// TestPollByHint: a reader's Poll costs one request (a conditional GET answered 304) while
// nothing changes, and lists (and moves to the new version) after a seal and after gc, each
// of which rewrote the hint; the writer wrote it at open too.
func TestPollByHint(t *testing.T) {
	_, url := startInitialized(t)
	w := openTestStore(t, url, store.Options{})
	m := newTestModel(3, 20_000)
	commitTree(t, w, 1, m.files(t))
	wb := w.Backend().(*Backend)
	data, _, err := wb.c.getBytes(wb.ctx, wb.c.loc.key(hintKey), nil)
	if err != nil {
		t.Fatalf("the hint after the first seal: %v", err)
	}
	if h, err := parseHint(data); err != nil || h.Latest != 1 {
		t.Fatalf("the hint after the first seal: %+v, %v", h, err)
	}

	r := openTestStore(t, url, store.Options{ReadOnly: true, Materialize: true})
	poll := func(wantListed bool, wantLatest uint64) Stats {
		t.Helper()
		before := storeStats(t, r)
		res, err := r.Poll()
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		after := storeStats(t, r)
		if !res.Hinted || res.Listed != wantListed {
			t.Fatalf("poll: %+v, want hinted and listed=%v", res, wantListed)
		}
		if latest, _ := r.Latest(); latest != wantLatest {
			t.Fatalf("poll: the reader's latest is v%d, want v%d", latest, wantLatest)
		}
		return Stats{Requests: after.Requests - before.Requests, HintRequests: after.HintRequests - before.HintRequests,
			HintChanges: after.HintChanges - before.HintChanges, ResponseBytes: after.ResponseBytes - before.ResponseBytes,
			ManifestDownloads: after.ManifestDownloads - before.ManifestDownloads}
	}
	poll(true, 1) // the first look reads the hint, and lists
	for i := range 5 {
		d := poll(false, 1)
		if d.Requests != 1 || d.HintRequests != 1 || d.HintChanges != 0 || d.ResponseBytes != 0 {
			t.Fatalf("idle poll %d: %+v, want one request, no body", i, d)
		}
	}
	for v := uint64(2); v <= 3; v++ {
		m.step()
		commitTree(t, w, v, m.files(t))
		if d := poll(true, v); d.HintChanges != 1 || d.ManifestDownloads != 1 {
			t.Fatalf("poll after the seal of v%d: %+v, want the hint moved and one manifest", v, d)
		}
		poll(false, v)
	}
	if _, err := w.GC(1); err != nil {
		t.Fatal(err)
	}
	poll(true, 3)
	if vs := r.Versions(); len(vs) != 1 {
		t.Fatalf("after gc the reader lists %d versions, want 1", len(vs))
	}
	poll(false, 3)
}

// TestPollRefusesBadHint: a hint that is damaged, of an unknown format version or forged to
// name a version that does not exist is at most a reason to list. The damaged one is refused
// (said once) and the reader lists at the rate of plain polls; the forged one makes it list
// and serve what the listing and the manifests say, nothing else.
func TestPollRefusesBadHint(t *testing.T) {
	_, url := startInitialized(t)
	w := openTestStore(t, url, store.Options{})
	m := newTestModel(4, 20_000)
	commitTree(t, w, 1, m.files(t))
	wb := w.Backend().(*Backend)
	putHint := func(b []byte) {
		t.Helper()
		if _, err := wb.c.putBytes(wb.ctx, wb.c.loc.key(hintKey), b, putCond{}); err != nil {
			t.Fatal(err)
		}
	}
	var logs logLines
	r := openTestStore(t, url, store.Options{ReadOnly: true, Materialize: true, Logger: logtest.New(logs.logf)})
	if res, err := r.Poll(); err != nil || !res.Listed || !res.Hinted {
		t.Fatalf("first poll: %+v, %v", res, err)
	}

	forged := encodeHint(changeHint{Latest: 99, Written: 1})
	putHint(forged)
	res, err := r.Poll()
	if err != nil || !res.Listed || !res.Hinted {
		t.Fatalf("poll after a forged hint: %+v, %v; want a listing", res, err)
	}
	if latest, _ := r.Latest(); latest != 1 || len(r.Versions()) != 1 {
		t.Fatalf("after a forged hint naming v99 the reader lists %v", r.Versions())
	}

	for _, c := range []struct {
		name string
		b    []byte
		log  string
	}{
		{"crc flipped", append(bytes.Clone(forged[:31]), forged[31]^0xff), "corrupt"},
		{"version 2", append(append([]byte(hintMagic), 2, 0, 0, 0), forged[12:]...), "unknown format version"},
		{"not a hint", []byte("<html>hello</html>"), "bad magic"},
	} {
		putHint(c.b)
		res, err := r.Poll()
		if err != nil || res.Hinted {
			t.Fatalf("%s: %+v, %v; want the hint refused", c.name, res, err)
		}
		if n := logs.count(c.log); n != 1 {
			t.Fatalf("%s: %d log lines say %q, want 1", c.name, n, c.log)
		}
		// Refused, it says nothing: the next look lists only at the plain polls' rate.
		before := storeStats(t, r)
		res, err = r.Poll()
		if err != nil || res.Hinted || res.Listed {
			t.Fatalf("%s, second poll: %+v, %v; want neither hinted nor listed", c.name, res, err)
		}
		if d := storeStats(t, r).Requests - before.Requests; d != 1 {
			t.Fatalf("%s, second poll: %d requests, want 1", c.name, d)
		}
		if n := logs.count(c.log); n != 1 {
			t.Fatalf("%s: %d log lines say %q after the second poll, want 1", c.name, n, c.log)
		}
	}
	// The writer's next seal writes a good hint again.
	m.step()
	commitTree(t, w, 2, m.files(t))
	if res, err := r.Poll(); err != nil || !res.Hinted || !res.Listed {
		t.Fatalf("poll after a seal: %+v, %v", res, err)
	}
	if latest, _ := r.Latest(); latest != 2 {
		t.Fatalf("the reader's latest is v%d, want v2", latest)
	}
}
