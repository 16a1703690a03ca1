package store

import (
	"errors"
	"testing"
	"time"
)

// hintBackend is a backend with a change hint the test sets, counting the listings.
type hintBackend struct {
	Backend
	changed, ok bool
	hintErr     error
	listErr     error
	lists       int
}

func (h *hintBackend) VersionsHint() (bool, bool, error) { return h.changed, h.ok, h.hintErr }

func (h *hintBackend) ListManifests() ([]uint64, error) {
	h.lists++
	if h.listErr != nil {
		return nil, h.listErr
	}
	return h.Backend.ListManifests()
}

// TestPollListsWhenHinted: Poll lists when the hint moved, when a listing it owes failed, when
// PollListEvery has passed, and without a usable hint when PollNoHintEvery has; otherwise it
// lists nothing. A backend without a hint lists at every Poll.
func TestPollListsWhenHinted(t *testing.T) {
	w, root := newStore(t, Options{})
	versions := modelVersions(t, 3, 3)
	commitTree(t, w, 1, versions[0])
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir()})
	if res, err := r.Poll(); err != nil || !res.Listed || res.Hinted {
		t.Fatalf("poll of a local store: %+v, %v; want a listing", res, err)
	}

	hb := &hintBackend{Backend: r.be.Backend, ok: true, changed: true}
	r.be.Backend, r.be.hinter = hb, hb
	step := func(what string, wantLists int, wantErr bool) {
		t.Helper()
		before := hb.lists
		res, err := r.Poll()
		if (err != nil) != wantErr || hb.lists-before != wantLists || res.Listed != (wantLists > 0) || res.Hinted != hb.ok {
			t.Fatalf("%s: %+v, %v, %d listings; want %d listings, error %v", what, res, err, hb.lists-before, wantLists, wantErr)
		}
	}
	step("hint moved", 1, false)
	hb.changed = false
	step("hint still", 0, false)
	commitTree(t, w, 2, versions[1])
	step("sealed, hint not moved yet", 0, false)
	if latest, _ := r.Latest(); latest != 1 {
		t.Fatalf("latest v%d before the hint moved, want v1", latest)
	}
	hb.changed, hb.listErr = true, errors.New("listing refused")
	step("hint moved, listing fails", 1, true)
	hb.changed, hb.listErr = false, nil
	step("the listing owed", 1, false)
	if latest, _ := r.Latest(); latest != 2 {
		t.Fatalf("latest v%d after the owed listing, want v2", latest)
	}
	step("nothing owed", 0, false)

	hb.hintErr = errors.New("hint GET failed")
	hb.ok = false
	step("hint unreadable, listed just now", 0, true)
	hb.hintErr = nil
	r.versions.poll.listed = time.Now().Add(-PollNoHintEvery)
	step("no hint, a second since the listing", 1, false)
	step("no hint, listed just now", 0, false)
	hb.ok = true
	r.versions.poll.listed = time.Now().Add(-PollListEvery)
	step("hint still, PollListEvery since the listing", 1, false)
	step("hint still, listed just now", 0, false)
}
