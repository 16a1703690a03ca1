package store

import "testing"

// TestVersionCacheKeepsTheVersionsInUse pins the cache's floor: a version larger than half
// the bound (a manifest of ~75,000 tensors and more) must not evict the other version a patch
// or the poller needs at the same time. Before the floor, PatchNote's second load evicted the
// first and a read-only mount's poller and readers re-parsed the newest manifest in turn
// (docs/benchmarks-history.md, "Tensor count (issue 29 item 5)" and its git history: decodeManifest 22-48x for 10x the tensors).
func TestVersionCacheKeepsTheVersionsInUse(t *testing.T) {
	c := newVersionCache(100)
	for v := uint64(1); v <= 3; v++ {
		c.add(v, &version{}, 80) // each alone most of the bound
	}
	for v := uint64(1); v <= 3; v++ {
		if !c.has(v) {
			t.Errorf("version %d of 3, each costing 80 of a bound of 100, evicted: the cache must keep the last %d versions whatever they cost", v, versionCacheFloor)
		}
	}
	c.add(4, &version{}, 80)
	if c.has(1) {
		t.Errorf("version 1 kept beside 2, 3 and 4 (costing 320 of a bound of 100): the floor is %d versions, not more", versionCacheFloor)
	}
	c.add(5, &version{}, 10)
	c.add(6, &version{}, 10)
	c.add(7, &version{}, 10)
	c.add(8, &version{}, 10)
	if n := c.len(); n > 5 {
		t.Errorf("%d small versions kept after large ones: the bound still applies above the floor", n)
	}
}
