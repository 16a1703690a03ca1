package store

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/internal/testfiles"
)

// sectionStats is what a version's tensors stored as delta sections: per body version, the
// sections, their bytes and the changed elements they hold.
type sectionStats struct {
	sections, bytes, changed [3]int64 // index: body version 1 or 2
}

// perChanged is the stored bytes per changed element of the sections of body version v.
func (st sectionStats) perChanged(v int) float64 {
	return float64(st.bytes[v]) / float64(st.changed[v])
}

// versionSections checks the body version of every delta object of version v: version 2
// exactly when its base has a delta section whose chain of contexts holds fewer than
// s.objects.contextChain version-2 sections, and returns what they stored.
func versionSections(t *testing.T, s *Store, v uint64) sectionStats {
	t.Helper()
	ver, err := s.versions.loadVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	var st sectionStats
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		for j := range f.Tensors {
			tn := &f.Tensors[j]
			m, err := s.objects.meta(tn.ID)
			if err != nil {
				t.Fatal(err)
			}
			if m.Kind != kindDelta || tn.Base != m.Base {
				continue // a whole copy, or an object an earlier version stored
			}
			d, err := s.objects.loadDelta(tn.ID)
			if err != nil {
				t.Fatalf("version %d: %s: %v", v, tn.Name, err)
			}
			want := 1
			bm, err := s.objects.meta(m.Base)
			if err != nil {
				t.Fatal(err)
			}
			if bm.DeltaLen > 0 {
				bd, err := s.objects.loadDelta(m.Base)
				if err != nil {
					t.Fatal(err)
				}
				if bd.chain < s.objects.contextChain {
					want = 2
				}
			}
			if d.info.Version != want {
				t.Errorf("version %d: %s %s: delta body version %d, want %d", v, f.Path, tn.Name, d.info.Version, want)
			}
			st.sections[d.info.Version]++
			st.bytes[d.info.Version] += int64(len(d.body))
			st.changed[d.info.Version] += d.info.Changed
		}
	}
	return st
}

// readsBack checks every version of s against the trees committed: exported (through the
// writer's read path) and read through OpenFile by a reader that replays every read from the
// objects alone (no materialized copy, no copies of files).
func readsBack(t *testing.T, s *Store, trees []map[string][]byte) { readsBackFrom(t, s, trees, 1) }

// readsBackFrom is readsBack for versions from and above (the versions gc kept).
func readsBackFrom(t *testing.T, s *Store, trees []map[string][]byte, from uint64) {
	t.Helper()
	r := openStore(t, s.Root(), Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
	for k, files := range trees {
		v := uint64(k + 1)
		if v < from {
			continue
		}
		sameTree(t, fmt.Sprintf("export of version %d", v), exportHashes(t, s, v), treeHashes(t, writeTree(t, t.TempDir(), files)))
		for name, want := range files {
			mustEqualBytes(t, fmt.Sprintf("version %d %s replayed", v, name), readWhole(t, r, v, name), want)
		}
	}
}

// TestContextSeries commits a generated series (lr 3e-6) twice, with version-2 sections and
// with version 1 only, and checks that version 2 is written exactly where a context exists and
// the chain bound allows it, that it stores fewer bytes per changed element than version 1
// for the same changes, that both stores hold the same objects and manifests, and that every
// version reads back byte-exact.
func TestContextSeries(t *testing.T) {
	trees := testfiles.ShardedSeries(t, 7, 20)
	s, _ := newStore(t, Options{})
	s.objects.contextChain = 3 // so that the series reaches the bound: v1, then 3 of v2, then v1, ...
	plain, _ := newStore(t, Options{})
	plain.objects.contextChain = 0
	for k, files := range trees {
		commitTree(t, s, uint64(k+1), files)
		commitTree(t, plain, uint64(k+1), files)
	}
	var v2, v1 sectionStats
	for v := uint64(2); v <= uint64(len(trees)); v++ {
		st, pst := versionSections(t, s, v), versionSections(t, plain, v)
		t.Logf("version %d: version-2 sections %d (%d bytes, %d changed), version-1 sections %d; version 1 only: %d sections, %d bytes",
			v, st.sections[2], st.bytes[2], st.changed[2], st.sections[1], pst.sections[1], pst.bytes[1])
		if pst.sections[2] != 0 {
			t.Errorf("version %d: %d version-2 sections written with contexts off", v, pst.sections[2])
		}
		if st.sections[1]+st.sections[2] != pst.sections[1] || st.changed[1]+st.changed[2] != pst.changed[1] {
			t.Errorf("version %d: %d+%d sections of %d+%d changes, version 1 only %d of %d", v,
				st.sections[1], st.sections[2], st.changed[1], st.changed[2], pst.sections[1], pst.changed[1])
		}
		// Chain bound 3: version 2's bases are whole copies (version 1), then three versions
		// of version-2 sections, then version 1 again.
		if wantV2 := (v-3)%4 < 3 && v >= 3; wantV2 != (st.sections[2] > 0) || wantV2 == (st.sections[1] > 0) {
			t.Errorf("version %d: %d version-2 and %d version-1 sections, want all version %d", v, st.sections[2], st.sections[1], map[bool]int{true: 2, false: 1}[wantV2])
		}
		if st.sections[2] > 0 {
			v2.bytes[2] += st.bytes[2]
			v2.changed[2] += st.changed[2]
			v1.bytes[1] += pst.bytes[1]
			v1.changed[1] += pst.changed[1]
		}
	}
	t.Logf("bytes per changed element: version 2 %.3f, version 1 %.3f (the same changes)", v2.perChanged(2), v1.perChanged(1))
	if v2.changed[2] == 0 || v2.perChanged(2) >= v1.perChanged(1) {
		t.Errorf("version 2 stores %.3f bytes per changed element, version 1 %.3f: want fewer", v2.perChanged(2), v1.perChanged(1))
	}
	for v := uint64(1); v <= uint64(len(trees)); v++ {
		if a, b := versionObjects(t, s, v), versionObjects(t, plain, v); a != b {
			t.Errorf("version %d: the stores' manifests name other objects:\n%s\n%s", v, a, b)
		}
	}
	readsBack(t, s, trees)
}

// versionObjects lists what version v's manifest names: each file's SHA-256 and objects.
func versionObjects(t *testing.T, s *Store, v uint64) string {
	t.Helper()
	ver, err := s.versions.loadVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		out += fmt.Sprintf("%s %x %s %s", f.Path, f.SHA256, f.ID, f.Header)
		for j := range f.Tensors {
			out += fmt.Sprintf(" %s:%s<-%s", f.Tensors[j].Name, f.Tensors[j].ID, f.Tensors[j].Base)
		}
		out += "\n"
	}
	return out
}

// TestStreamContextMatchesBatch: the mount's streaming path codes against the same contexts
// as the batch path, so it stores the same version-2 sections byte for byte (streamAndBatch
// compares every object), and the series has some.
func TestStreamContextMatchesBatch(t *testing.T) {
	s := streamAndBatch(t, streamSeries(t, 6, 1), 7, nil)
	sections := map[byte]int{}
	for _, file := range reachable(t, s) {
		h, err := parseObjectHeader(file, int64(len(file)))
		if err != nil {
			t.Fatal(err)
		}
		if h.HasDelta() {
			sections[file[h.DeltaOffset()+4]]++
		}
	}
	t.Logf("delta sections by body version: %v", sections)
	if sections[2] == 0 || sections[1] == 0 {
		t.Errorf("delta sections by body version %v: want both versions", sections)
	}
}

// TestContextGC drops the versions before chains of version-2 sections (with long chains of
// deltas, and with short ones, whose anchors carry version-2 links): every kept section still
// decodes (a section whose context went is kept in version 1, byte-exact in its changes), every
// kept version reads back byte-exact from the objects alone, a version committed after gc
// reads back, and Verify is clean (closeStore).
func TestContextGC(t *testing.T) {
	trees := testfiles.ShardedSeries(t, 9, 21)
	for _, c := range []struct{ maxChain, keep int }{{64, 1}, {64, 3}, {2, 2}, {2, 3}} {
		maxChain, keep := c.maxChain, c.keep
		{
			t.Run(fmt.Sprintf("chain %d keep %d", maxChain, keep), func(t *testing.T) {
				s, _ := newStore(t, Options{MaxChain: maxChain})
				s.objects.contextChain = 16 // chains of contexts longer than the series
				for k, files := range trees[:8] {
					commitTree(t, s, uint64(k+1), files)
				}
				from := uint64(9 - keep)
				kept := map[ID]bool{}
				for v := from; v <= 8; v++ {
					ver, err := s.versions.loadVersion(v)
					if err != nil {
						t.Fatal(err)
					}
					manifestRoots(ver.m, kept)
				}
				anchors := 0 // whole copies whose version-2 link loses its context
				for id := range kept {
					if m, err := s.objects.meta(id); err == nil && m.Kind == kindFull && m.DeltaLen > 0 && !kept[m.Base] {
						if v2, err := s.collector.sectionIsV2(id); err == nil && v2 {
							anchors++
						}
					}
				}
				st, err := s.GC(keep)
				if err != nil {
					t.Fatal(err)
				}
				linksV1, v2 := 0, 0
				for id := range kept {
					m, err := s.objects.meta(id)
					if err != nil {
						t.Fatal(err)
					}
					if m.DeltaLen == 0 {
						continue
					}
					d, err := s.objects.loadDelta(id)
					if err != nil {
						t.Fatalf("kept object %s: %v", id, err)
					}
					if !kept[m.Base] {
						if d.info.Version != 1 {
							t.Errorf("kept object %s: version-%d section whose base gc dropped", id, d.info.Version)
						}
						linksV1++
					} else if d.info.Version >= 1 {
						v2++
					}
				}
				t.Logf("gc: %+v; kept sections: %d version 1 against dropped bases (%d of them version-2 links before), %d version 2", st, linksV1, anchors, v2)
				if linksV1 == 0 || (keep > 1 && v2 == 0) || (maxChain == 2 && keep == 2 && anchors == 0) {
					t.Errorf("the series did not test it: %d kept version-1 links, %d version-2 sections", linksV1, v2)
				}
				commitTree(t, s, 9, trees[8])
				readsBackFrom(t, s, trees, from)
			})
		}
	}
}

// TestContextDamage damages the delta section of an object that version-2 sections are coded
// against (a flipped byte; the object missing): reads of every version that needs it fail
// with ErrCorrupt (EIO at the mount), never "not found" and never wrong bytes; Verify reports
// the object and names every section that depends on it; the versions before it read back;
// and with the object restored nothing is lost.
func TestContextDamage(t *testing.T) {
	trees := testfiles.ShardedSeries(t, 5, 22)
	s, root := newLooseStore(t, Options{})
	for k, files := range trees {
		commitTree(t, s, uint64(k+1), files)
	}
	// A tensor of version 5 whose chain is whole (v1), then a version-1 delta (v2), then
	// version-2 deltas (v3, v4, v5): damage v3's.
	ver5, err := s.versions.loadVersion(5)
	if err != nil {
		t.Fatal(err)
	}
	f := &ver5.m.Files[0]
	for i := range ver5.m.Files {
		if len(ver5.m.Files[i].Tensors) > 0 {
			f = &ver5.m.Files[i]
			break
		}
	}
	var chain []ID // v5's object, v4's, v3's
	for id := f.Tensors[0].ID; len(chain) < 3; {
		d, err := s.objects.loadDelta(id)
		if err != nil || d.info.Version != 2 {
			t.Fatalf("object %s of %s: section %v, %v: want version 2", id, f.Path, d, err)
		}
		chain = append(chain, id)
		id = d.hdr.Base
	}
	target := chain[2]
	path := s.be.given.(*localBackend).ObjectPath(target)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	for _, c := range []struct {
		name   string
		damage func()
	}{
		{"flipped", func() {
			b := append([]byte(nil), orig...)
			b[objectHeaderLen+30] ^= 0x10 // inside the delta section
			os.Chmod(path, 0o644)
			if err := os.WriteFile(path, b, 0o444); err != nil {
				t.Fatal(err)
			}
		}},
		{"missing", func() {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.damage()
			r := openLoose(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
			expectDamage(r)
			for v := uint64(1); v <= 5; v++ {
				file, err := r.OpenFile(v, f.Path)
				if err != nil {
					t.Fatal(err)
				}
				b := make([]byte, file.Size())
				n, err := file.ReadAt(b, 0)
				file.Close()
				if v <= 2 {
					mustEqualBytes(t, fmt.Sprintf("version %d %s", v, f.Path), b[:n], trees[v-1][f.Path])
					continue
				}
				// (A missing object's error also wraps the system's ENOENT; ErrCorrupt makes it
				// EIO at the mount whatever else it wraps: fs/errors.go.) Reads are checked per
				// tensor (read_check.go): the bytes before the damaged tensor are served, exact,
				// and none of it.
				ver, verr := r.versions.sealedVersion(v)
				if verr != nil {
					t.Fatal(verr)
				}
				vf := ver.files[f.Path]
				start := int(vf.HeaderLen + vf.Tensors[0].Begin)
				if !errors.Is(err, ErrCorrupt) || n > start || string(b[:n]) != string(trees[v-1][f.Path][:n]) {
					t.Errorf("version %d %s: read %d bytes, %v: want at most the %d before the damaged tensor and ErrCorrupt", v, f.Path, n, err, start)
				}
			}
			rep, err := r.Verify(nil)
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("verify: %v", err)
			}
			// The damaged object is named (a missing one by the findings of the versions that
			// need it); the sound objects whose context it is are not damage of their own
			// (their files pass their checks): Repair must not move them (issue 27).
			for _, id := range chain {
				found, own := false, false
				for _, d := range rep.Damaged {
					found = found || d.Object == id || id == target && strings.Contains(d.Err.Error(), id.String())
					own = own || d.Object == id
				}
				if id == target && !found {
					t.Errorf("verify does not name object %s (%d back from version 5): %v", id, slices.Index(chain, id), rep.Damaged)
				}
				if id != target && own {
					t.Errorf("verify calls sound object %s (%d back from version 5) damaged: %v", id, slices.Index(chain, id), rep.Damaged)
				}
			}
			for v := uint64(3); v <= 5; v++ {
				if !slices.ContainsFunc(rep.Damaged, func(d Damage) bool { return d.Version == v }) {
					t.Errorf("verify does not name version %d, which needs the damaged object: %v", v, rep.Damaged)
				}
			}
			closeStore(t, r)
			os.Remove(path)
			if err := os.WriteFile(path, orig, 0o444); err != nil {
				t.Fatal(err)
			}
			readsBack(t, openLoose(t, root, Options{ReadOnly: true}), trees)
		})
	}
}

// TestContextGCOtherProcess: a reader that loaded a version-2 section before the writer's gc
// re-coded it in version 1 (its context dropped with its base) loads it again rather than
// failing: every kept version reads back byte-exact in the reader.
func TestContextGCOtherProcess(t *testing.T) {
	trees := testfiles.ShardedSeries(t, 6, 23)
	s, root := newStore(t, Options{})
	s.objects.contextChain = 16
	for k, files := range trees {
		commitTree(t, s, uint64(k+1), files)
	}
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
	// The reader loads the sections of version 4 (version 2, coded against version 3's).
	ver4, err := r.versions.loadVersion(4)
	if err != nil {
		t.Fatal(err)
	}
	loaded := 0
	var bases []ID
	for i := range ver4.m.Files {
		for _, tn := range ver4.m.Files[i].Tensors {
			if d, err := r.objects.loadDelta(tn.ID); err == nil && d.info.Version == 2 {
				loaded++
				bases = append(bases, d.hdr.Base)
			}
		}
	}
	if loaded == 0 {
		t.Fatal("version 4 has no version-2 section")
	}
	if _, err := s.GC(3); err != nil { // keeps 4, 5, 6: version 4's deltas lose their bases
		t.Fatal(err)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	// The reader's object headers are dropped (a reader whose headers are stale fails
	// anyway, with or without contexts), and the sections of version 3 it loaded as contexts
	// (gone from the store now); its sections of version 4 stay, version 2 against them.
	for _, id := range bases {
		r.objects.deltas.remove(id)
	}
	r.objects.objInfos.clear()
	r.objects.metaMu.Lock()
	clear(r.objects.metas)
	r.objects.metaMu.Unlock()
	if err := r.ix.clearObjects(); err != nil {
		t.Fatal(err)
	}
	for v := uint64(6); v >= 4; v-- {
		for name, want := range trees[v-1] {
			mustEqualBytes(t, fmt.Sprintf("version %d %s in the reader", v, name), readWhole(t, r, v, name), want)
		}
	}
}

// TestForwardCachesContexts: bringing the writer's materialized copy forward decodes the new
// version's delta sections through the block cache, so the next ingest, which codes its deltas
// against exactly those sections, finds its contexts decoded.
func TestForwardCachesContexts(t *testing.T) {
	trees := testfiles.ShardedSeries(t, 3, 24)
	s, _ := newStore(t, Options{})
	for k, files := range trees {
		commitTree(t, s, uint64(k+1), files)
	}
	ver, err := s.versions.loadVersion(3)
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for i := range ver.m.Files {
		for _, tn := range ver.m.Files[i].Tensors {
			m, err := s.objects.meta(tn.ID)
			if err != nil || m.Kind != kindDelta || tn.Base != m.Base {
				continue
			}
			for b := int64(0); b*(1<<20) < m.ContentLen/int64(m.Width); b++ {
				blocks++
				if !s.objects.blocks.has(blockKey{tn.ID, b}) {
					t.Errorf("%s %s: block %d of its delta is not in the block cache after the copy moved to version 3", ver.m.Files[i].Path, tn.Name, b)
				}
			}
		}
	}
	if blocks == 0 {
		t.Fatal("version 3 has no delta")
	}
}
