package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store/pack"
)

// packedFixture is a small store whose objects are also in two packs, each named by its own
// index record (sequence numbers 1 and 2), written by hand with package pack and the local
// backend: the pack layer is not needed to test what verify and repair make of packs. The
// loose objects stay, so the versions read as before whatever the packs suffer.
type packedFixture struct {
	s       *Store
	lb      *localBackend
	packs   [2]ID
	indexes [2]string
	entries [2][]pack.Entry
}

func newPackedFixture(t *testing.T) *packedFixture {
	t.Helper()
	// Loose objects first (the format-2 layout), packed below by hand: the fixture knows
	// exactly which objects each of its two packs and indexes holds.
	s, _ := newLooseStore(t, Options{})
	commitAll(t, s, []map[string][]byte{stepFiles(t, 1), stepFiles(t, 2), stepFiles(t, 3)})
	lb := s.be.given.(*localBackend)
	var ids []ID
	if err := lb.ListObjects(func(id ID, _ int64) error { ids = append(ids, id); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ids) < 4 {
		t.Fatalf("%d objects: want at least 4", len(ids))
	}
	slices.SortFunc(ids, func(a, b ID) int { return bytes.Compare(a[:], b[:]) })
	f := &packedFixture{s: s, lb: lb}
	half := [2][]ID{ids[:len(ids)/2], ids[len(ids)/2:]}
	for i, group := range half {
		tmp, err := lb.CreateTemp()
		if err != nil {
			t.Fatal(err)
		}
		w := pack.NewWriter(tmp)
		for _, id := range group {
			b, err := os.ReadFile(lb.ObjectPath(id))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Add(id, b); err != nil {
				t.Fatal(err)
			}
		}
		pid, size, ents, err := w.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.PutPack(pid, tmp); err != nil {
			t.Fatal(err)
		}
		x := pack.Index{Seq: uint64(i + 1), Packs: []pack.IndexedPack{{ID: pid, Size: size, Entries: ents}}}
		enc := x.Encode()
		name := pack.Name(x.Seq, enc)
		if err := lb.PutRecord(RecordIndex, name, enc); err != nil {
			t.Fatal(err)
		}
		f.packs[i], f.indexes[i], f.entries[i] = pid, name, ents
	}
	if err := lb.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	return f
}

// addSecondRecord writes object id's file b again as the one record of a pack of its own,
// indexed with sequence number 3: that record wins the pack map. It returns the new pack and
// its entries.
func (f *packedFixture) addSecondRecord(t *testing.T, id ID, b []byte) (pack.ID, []pack.Entry) {
	t.Helper()
	tmp, err := f.lb.CreateTemp()
	if err != nil {
		t.Fatal(err)
	}
	w := pack.NewWriter(tmp)
	if err := w.Add(id, b); err != nil {
		t.Fatal(err)
	}
	pid, size, ents, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.lb.PutPack(pid, tmp); err != nil {
		t.Fatal(err)
	}
	x := pack.Index{Seq: 3, Packs: []pack.IndexedPack{{ID: pid, Size: size, Entries: ents}}}
	if err := f.lb.PutRecord(RecordIndex, pack.Name(3, x.Encode()), x.Encode()); err != nil {
		t.Fatal(err)
	}
	return pid, ents
}

func (f *packedFixture) packPath(i int) string { return f.lb.PackPath(f.packs[i]) }
func (f *packedFixture) indexPath(i int) string {
	return filepath.Join(f.lb.LocalDir(), indexDir, f.indexes[i])
}

func (f *packedFixture) check(t *testing.T) packReport {
	t.Helper()
	rep, err := checkPacks(f.s.checker.packEnv())
	if err != nil {
		t.Fatalf("checkPacks: %v", err)
	}
	return rep
}

// rewriteFile replaces p's bytes by fn's (a read-only pack too); fn nil removes p.
func rewriteFile(t *testing.T, p string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if fn == nil {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		return
	}
	os.Chmod(p, 0o600)
	if err := os.WriteFile(p, fn(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func flipAt(off func(n int) int) func([]byte) []byte {
	return func(b []byte) []byte { b[off(len(b))] ^= 0x41; return b }
}

func swapFiles(t *testing.T, a, b string) {
	t.Helper()
	ab, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	rewriteFile(t, a, func([]byte) []byte { return bb })
	rewriteFile(t, b, func([]byte) []byte { return ab })
}

func TestCheckPacksIntact(t *testing.T) {
	f := newPackedFixture(t)
	rep := f.check(t)
	if len(rep.Damaged)+len(rep.Unreadable)+len(rep.Orphans) != 0 {
		t.Fatalf("intact packs: %+v", rep)
	}
	if rep.Packs != 2 || rep.Indexes != 2 || rep.Records != len(f.entries[0])+len(f.entries[1]) {
		t.Errorf("checked %d packs, %d indexes, %d records; want 2, 2, %d", rep.Packs, rep.Indexes, rep.Records, len(f.entries[0])+len(f.entries[1]))
	}
}

// TestCheckPacksNamesDamage damages each kind of file of packs in each way (a flipped byte,
// a cut, a deletion, two files swapped) and checks that checkPacks names what is damaged: the
// object and its pack for a record, the pack for its table or file, the index for its record.
func TestCheckPacksNamesDamage(t *testing.T) {
	type want struct {
		what    string // PackDamage.what() of one finding
		err     string // in its error
		orphans int
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, f *packedFixture)
		want   func(f *packedFixture) []want
		more   bool // findings besides those wanted (records read through a pack's wrong bytes)
	}{
		{"record flip", func(t *testing.T, f *packedFixture) {
			e := f.entries[0][0]
			rewriteFile(t, f.packPath(0), flipAt(func(int) int { return int(e.Offset + e.Length/2) }))
		}, func(f *packedFixture) []want {
			return []want{{what: "object " + ID(f.entries[0][0].ID).String() + " in pack " + f.packs[0].String() + " (pack index " + f.indexes[0] + ")", err: "CRC-32C"}}
		}, false},
		{"table flip", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.packPath(0), flipAt(func(n int) int { return n - pack.FooterLen - 10 }))
		}, func(f *packedFixture) []want {
			return []want{{what: "pack " + f.packs[0].String() + " (pack index " + f.indexes[0] + ")", err: "table"}}
		}, false},
		{"pack truncate", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.packPath(1), func(b []byte) []byte { return b[:len(b)-7] })
		}, func(f *packedFixture) []want {
			w := "pack " + f.packs[1].String() + " (pack index " + f.indexes[1] + ")"
			return []want{{what: w, err: "its index says"}, {what: w, err: "table"}}
		}, false},
		{"pack delete", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.packPath(0), nil)
		}, func(f *packedFixture) []want {
			return []want{{what: "pack " + f.packs[0].String() + " (pack index " + f.indexes[0] + ")", err: "pack missing"}}
		}, false},
		{"packs swapped", func(t *testing.T, f *packedFixture) {
			swapFiles(t, f.packPath(0), f.packPath(1))
		}, func(f *packedFixture) []want {
			var ws []want
			for i := range 2 {
				w := "pack " + f.packs[i].String() + " (pack index " + f.indexes[i] + ")"
				ws = append(ws, want{what: w, err: "holds the table of pack " + f.packs[1-i].String()})
			}
			return ws
		}, true},
		{"index flip", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.indexPath(0), flipAt(func(n int) int { return n / 2 }))
		}, func(f *packedFixture) []want {
			return []want{{what: "pack index " + f.indexes[0], err: "checksum", orphans: 1}}
		}, false},
		{"index truncate", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.indexPath(1), func(b []byte) []byte { return b[:30] })
		}, func(f *packedFixture) []want {
			return []want{{what: "pack index " + f.indexes[1], err: "pack index", orphans: 1}}
		}, false},
		{"index delete", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.indexPath(1), nil)
		}, func(f *packedFixture) []want {
			return []want{{orphans: 1}}
		}, false},
		{"indexes swapped", func(t *testing.T, f *packedFixture) {
			swapFiles(t, f.indexPath(0), f.indexPath(1))
		}, func(f *packedFixture) []want {
			return []want{{what: "pack index " + f.indexes[0], err: "sequence number", orphans: 2}, {what: "pack index " + f.indexes[1], err: "sequence number", orphans: 2}}
		}, false},
		{"orphan with a damaged table", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.indexPath(0), nil)
			rewriteFile(t, f.packPath(0), flipAt(func(n int) int { return n - 2 }))
		}, func(f *packedFixture) []want {
			return []want{{what: "pack " + f.packs[0].String(), err: "magic"}}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newPackedFixture(t)
			tc.damage(t, f)
			rep := f.check(t)
			ws := tc.want(f)
			var lines []string
			for _, d := range rep.Damaged {
				lines = append(lines, d.String())
			}
			if len(rep.Unreadable) > 0 {
				t.Errorf("unreadable: %v", rep.Unreadable)
			}
			n := 0
			for _, w := range ws {
				if w.what == "" {
					continue
				}
				n++
				if !slices.ContainsFunc(rep.Damaged, func(d PackDamage) bool {
					return d.what() == w.what && strings.Contains(d.Err.Error(), w.err) && isVerdictDamage(d.Err)
				}) {
					t.Errorf("no finding %q with %q among:\n%s", w.what, w.err, strings.Join(lines, "\n"))
				}
			}
			if len(rep.Damaged) != n && !(tc.more && len(rep.Damaged) > n) {
				t.Errorf("%d findings, want %d:\n%s", len(rep.Damaged), n, strings.Join(lines, "\n"))
			}
			if len(rep.Orphans) != ws[0].orphans {
				t.Errorf("orphans %v, want %d", rep.Orphans, ws[0].orphans)
			}
			// Verify says the same, and fails.
			vrep, err := f.s.Verify(nil)
			if n > 0 && (!errors.Is(err, ErrCorrupt) || len(vrep.Packs.Damaged) != len(rep.Damaged)) {
				t.Errorf("Verify: %v, %d damaged in packs; want ErrCorrupt and %d", err, len(vrep.Packs.Damaged), len(rep.Damaged))
			}
			if n == 0 && err != nil {
				t.Errorf("Verify: %v (an orphan is no damage)", err)
			}
			if n > 0 {
				expectDamage(f.s)
			}
		})
	}
}

// A damaged record that another pack's record serves (the object written again since,
// indexed with a higher sequence number) is noted, not damage: no read reaches it.
func TestCheckPacksSupersededRecord(t *testing.T) {
	f := newPackedFixture(t)
	e := f.entries[0][0]
	b, err := os.ReadFile(f.lb.ObjectPath(e.ID))
	if err != nil {
		t.Fatal(err)
	}
	f.addSecondRecord(t, e.ID, b)
	rewriteFile(t, f.packPath(0), flipAt(func(int) int { return int(e.Offset + 120) }))
	rep := f.check(t)
	if len(rep.Damaged) != 0 || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "serves the object") {
		t.Fatalf("damaged %v, notes %q: want one note and no damage", rep.Damaged, rep.Notes)
	}
}

// TestRepairPacks: --repair writes an index again from the packs' own tables where an index
// is damaged or lost, moves the damaged index record aside, writes a damaged table again from
// its index, replaces an index that names a missing pack; Verify passes afterwards. A damaged
// record is copied into quarantine and left in its pack, and the repair says so.
func TestRepairPacks(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(t *testing.T, f *packedFixture)
		indexes int  // index records written
		moved   int  // files moved into quarantine
		mended  int  // packs written again (pack 0 among them: its pristine bytes)
		left    bool // damage stays (a record in its pack)
	}{
		{"index flip", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.indexPath(0), flipAt(func(n int) int { return n - 3 }))
		}, 1, 1, 0, false},
		{"index delete", func(t *testing.T, f *packedFixture) { rewriteFile(t, f.indexPath(1), nil) }, 1, 0, 0, false},
		{"indexes swapped", func(t *testing.T, f *packedFixture) { swapFiles(t, f.indexPath(0), f.indexPath(1)) }, 1, 2, 0, false},
		{"packs swapped", func(t *testing.T, f *packedFixture) { swapFiles(t, f.packPath(0), f.packPath(1)) }, 0, 0, 2, false},
		{"pack copied over another", func(t *testing.T, f *packedFixture) {
			b, err := os.ReadFile(f.packPath(1))
			if err != nil {
				t.Fatal(err)
			}
			rewriteFile(t, f.packPath(0), func([]byte) []byte { return b })
		}, 0, 0, 0, true},
		{"table flip", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.packPath(0), flipAt(func(n int) int { return n - pack.FooterLen - 1 }))
		}, 0, 0, 1, false},
		{"pack delete", func(t *testing.T, f *packedFixture) { rewriteFile(t, f.packPath(0), nil) }, 0, 1, 0, false},
		{"orphan with a damaged table", func(t *testing.T, f *packedFixture) {
			rewriteFile(t, f.indexPath(0), nil)
			rewriteFile(t, f.packPath(0), func(b []byte) []byte { return b[:len(b)-5] })
		}, 0, 1, 0, false},
		{"record flip", func(t *testing.T, f *packedFixture) {
			e := f.entries[1][0]
			rewriteFile(t, f.packPath(1), flipAt(func(int) int { return int(e.Offset + 100) }))
		}, 0, 0, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newPackedFixture(t)
			pristine, err := os.ReadFile(f.packPath(0))
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, f)
			before := f.check(t)
			dry, err := f.s.RepairWith(RepairOptions{DryRun: true})
			if err != nil && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("dry run: %v", err)
			}
			if again := f.check(t); len(again.Damaged) != len(before.Damaged) || len(again.Orphans) != len(before.Orphans) {
				t.Fatalf("the dry run changed the packs: %+v, then %+v", before, again)
			}
			rep, err := f.s.RepairWith(RepairOptions{})
			if tc.left {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "stay") {
					t.Errorf("repair: %v; want the damaged record named as staying", err)
				}
			} else if err != nil {
				t.Fatalf("repair: %v", err)
			}
			if len(rep.PackIndexes) != tc.indexes || len(rep.Moved) != tc.moved || len(rep.MendedPacks) != tc.mended {
				t.Errorf("repair wrote indexes %v, moved %v, mended packs %v; want %d, %d, %v", rep.PackIndexes, rep.Moved, rep.MendedPacks, tc.indexes, tc.moved, tc.mended)
			}
			for _, m := range rep.Moved {
				if _, err := os.Stat(m); err != nil {
					t.Errorf("moved to %s: %v", m, err)
				}
				if !slices.Contains(dry.Moved, m) {
					t.Errorf("the repair moved %s, which the dry run (%v) did not name", m, dry.Moved)
				}
			}
			if tc.mended > 0 {
				if got, _ := os.ReadFile(f.packPath(0)); !bytes.Equal(got, pristine) {
					t.Errorf("pack 0 after its table was written again: %d bytes, not its pristine %d", len(got), len(pristine))
				}
			}
			after := f.check(t)
			if tc.left {
				if len(rep.KeptRecords) == 0 || len(after.Damaged) == 0 {
					t.Errorf("after the repair: kept %v, damaged %v; want the records copied aside and still reported", rep.KeptRecords, after.Damaged)
				}
				for _, q := range rep.KeptRecords {
					if _, err := os.Stat(q); err != nil {
						t.Errorf("kept record: %v", err)
					}
				}
				e := f.entries[1][0]
				q := filepath.Join(f.lb.LocalDir(), "quarantine", "objects", ID(e.ID).String())
				if b, err := os.ReadFile(q); tc.name == "record flip" && (err != nil || int64(len(b)) != e.Length) {
					t.Errorf("quarantine of the damaged record: %d bytes, %v; want %d", len(b), err, e.Length)
				}
				expectDamage(f.s)
				return
			}
			if len(after.Damaged)+len(after.Orphans) != 0 {
				t.Errorf("after the repair: damaged %v, orphans %v", after.Damaged, after.Orphans)
			}
			if _, err := f.s.Verify(nil); err != nil {
				t.Errorf("verify after the repair: %v", err)
			}
		})
	}
}

// rebuildIndexes on its own (the function the pack layer's helpers share): a lost index is
// written again from its pack's table, and names exactly what the lost one named; with every
// pack named it writes nothing.
func TestRebuildIndexes(t *testing.T) {
	f := newPackedFixture(t)
	env := f.s.checker.packEnv()
	if names, err := rebuildIndexes(env); err != nil || len(names) != 0 {
		t.Fatalf("every pack named: wrote %v, %v; want nothing", names, err)
	}
	rewriteFile(t, f.indexPath(0), nil)
	names, err := rebuildIndexes(env)
	if err != nil || len(names) != 1 {
		t.Fatalf("rebuildIndexes: %v, %v; want one index", names, err)
	}
	x, err := loadIndex(f.lb, names[0])
	if err != nil {
		t.Fatal(err)
	}
	if seq, _ := pack.ParseName(names[0]); seq != 3 || len(x.Packs) != 1 || x.Packs[0].ID != f.packs[0] || !slices.Equal(x.Packs[0].Entries, f.entries[0]) {
		t.Errorf("index %s: %+v; want sequence 3 naming pack %s with its %d entries", names[0], x.Index, f.packs[0], len(f.entries[0]))
	}
	if rep := f.check(t); len(rep.Damaged)+len(rep.Orphans) != 0 {
		t.Errorf("after rebuildIndexes: %+v", rep)
	}
}
