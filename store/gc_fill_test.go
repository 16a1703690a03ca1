package store

import "testing"

// gc's live set at the end of a gc (liveNow, the repack's) beside a writer that holds an
// object it has not written yet: the object is no root yet (nothing to walk), and the gc does
// not fail on it (TestGCBesideReaderAndWriter met it at random: "repack: object ... is
// missing").
func TestLiveNowBesideAHeldUnwrittenObject(t *testing.T) {
	versions := modelVersions(t, 2, 43)
	s, _ := newStore(t, Options{})
	commitTree(t, s, 1, versions[0])
	w, err := s.NewVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	unwritten := IDOf([]byte("an object a writer holds before it writes it"))
	w.hold(unwritten)
	live, err := s.collector.liveNow()
	if err != nil {
		t.Fatalf("gc's live set beside a writer holding an unwritten object: %v", err)
	}
	if live[unwritten] {
		t.Fatal("an object not stored yet is in the live set")
	}
	if len(live) == 0 {
		t.Fatal("the live set lost version 1's objects")
	}
}

// A cache fill that read an object before gc rewrote it, and lands after gc's forget of that
// object, is dropped (cacheFill): else the cache would keep the old representation (a delta
// whose base gc deleted) for good.
func TestCacheFillAfterAForgetIsDropped(t *testing.T) {
	versions := modelVersions(t, 1, 47)
	s, _ := newStore(t, Options{})
	commitTree(t, s, 1, versions[0])
	o := s.objects
	id := IDOf([]byte("an object gc rewrites"))
	stale := objMeta{Kind: kindDelta, Width: 2, Base: IDOf([]byte("a base gc deleted")), ContentLen: 8}

	epoch := o.fillEpoch()
	o.forgetMeta(id) // gc rewrote id after the fill read it
	o.putMetasIf(epoch, []idMeta{{id, stale}})
	if m, ok := o.cachedMeta(id); ok {
		t.Fatalf("a meta read before gc's forget was cached after it: %+v", m)
	}
	if o.cacheFill(epoch, func() {}) {
		t.Fatal("cacheFill ran a fill that began before a forget")
	}
	// A fill that began after the forget is cached.
	o.putMetasIf(o.fillEpoch(), []idMeta{{id, stale}})
	if _, ok := o.cachedMeta(id); !ok {
		t.Fatal("a fill that began after the forget was not cached")
	}
}
