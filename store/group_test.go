package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/testfiles"
)

// shardOwner gives model-0000K-of-00004.safetensors to rank K-1 and every other file (the
// index, the config) to rank 0.
func shardOwner(name string, ranks int) int {
	var k, n int
	if _, err := fmt.Sscanf(name, "model-%05d-of-%05d.safetensors", &k, &n); err == nil && k >= 1 {
		return (k - 1) % ranks
	}
	return 0
}

func sortedNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// fixedClock makes s's manifests' creation times a fixed sequence.
func fixedClock(s *Store) {
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.ingest.now = func() time.Time { clock = clock.Add(time.Minute); return clock }
}

// groupStore is a store with its writer (the publisher) and W rank stores.
type groupStore struct {
	root  string
	pub   *Store
	ranks []*Store
}

func newGroupStore(t *testing.T, group string, ranks int) *groupStore {
	t.Helper()
	pub, root := newStore(t, Options{})
	fixedClock(pub)
	gs := &groupStore{root: root, pub: pub}
	for r := range ranks {
		gs.ranks = append(gs.ranks, openRank(t, root, Rank{Group: group, Rank: r, Ranks: ranks}))
	}
	return gs
}

func openRank(t *testing.T, root string, r Rank) *Store {
	t.Helper()
	s, err := OpenRank(root, r, Options{CacheDir: t.TempDir(), Logger: logtest.New(t.Logf)})
	if err != nil {
		t.Fatalf("open %s: %v", r, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// writePart has rank store s write and seal its part of version v: the files of files
// that owner gives it.
func writePart(s *Store, v uint64, files map[string][]byte, mine func(string) bool) (PartInfo, error) {
	var own []string
	for _, n := range sortedNames(files) {
		if mine(n) {
			own = append(own, n)
		}
	}
	w, err := s.NewPart(v, own...)
	if err != nil {
		return PartInfo{}, err
	}
	for _, n := range own {
		var err error
		if v == 2 && strings.HasSuffix(n, ".safetensors") {
			err = streamFile(w, n, files[n]) // as the mount writes: the streaming path
		} else {
			err = w.AddFile(n, bytes.NewReader(files[n]), int64(len(files[n])), 0o644)
		}
		if err != nil {
			w.Abort()
			return PartInfo{}, err
		}
	}
	return w.SealPart()
}

// streamFile adds file n to w through the streaming path, in writes of 100 kB.
func streamFile(w *Writer, n string, b []byte) error {
	st, err := w.StreamFile(n)
	if err != nil {
		return err
	}
	for len(b) > 0 {
		k := min(len(b), 100_000)
		if _, err := st.Write(b[:k]); err != nil {
			return err
		}
		b = b[k:]
	}
	if err := st.Close(); err != nil {
		return err
	}
	return w.AddStream(n, st, 0o644)
}

// writeParts has every rank write its part of version v at once (goroutines).
func (gs *groupStore) writeParts(t *testing.T, v uint64, files map[string][]byte) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(gs.ranks))
	for r, s := range gs.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = writePart(s, v, files, func(n string) bool { return shardOwner(n, len(gs.ranks)) == r })
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("parts of version %d: %v", v, err)
	}
}

// TestGroupStoresWhatOneWriterStores commits the same sharded series (3 versions, 4 shards
// and the index) by one writer and by a group of 4 ranks (version 2's shards through the
// streaming path, as the mount writes them): every object and manifest is the same, byte for
// byte; each rank's materialized copy holds only its own files; no record
// is left; and readers read the group's versions as they read any.
func TestGroupStoresWhatOneWriterStores(t *testing.T) {
	series := groupSeries(t, 3)
	single, singleRoot := newStore(t, Options{})
	fixedClock(single)
	for i, files := range series {
		w, err := single.NewVersion(uint64(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range sortedNames(files) {
			if err := w.AddFile(n, bytes.NewReader(files[n]), int64(len(files[n])), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Seal(); err != nil {
			t.Fatal(err)
		}
	}

	gs := newGroupStore(t, "train", 4)
	for i, files := range series {
		v := uint64(i + 1)
		gs.writeParts(t, v, files)
		if _, ok := gs.pub.Latest(); ok && i == 0 {
			t.Fatal("a version appeared before it was published")
		}
		if _, err := gs.pub.PublishGroup("train", v, 4); err != nil {
			t.Fatalf("publish version %d: %v", v, err)
		}
	}
	want, n := objectsDigest(t, singleRoot)
	got, m := objectsDigest(t, gs.root)
	if got != want || n != m {
		t.Fatalf("a group of 4 stored %d objects and manifests hashing to %s; one writer %d hashing to %s", m, got, n, want)
	}
	t.Logf("%d objects and manifests, identical", n)
	// The later versions are deltas: the ranks diffed against their own files' last versions.
	for v := uint64(2); v <= 3; v++ {
		ver, err := gs.pub.versions.loadVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		based, all := 0, 0
		for _, f := range ver.m.Files {
			for _, tn := range f.Tensors {
				all++
				if !tn.Base.IsZero() {
					based++
				}
			}
		}
		if based != all || all == 0 {
			t.Fatalf("version %d: %d of %d tensors diffed against a base", v, based, all)
		}
		if ver.m.Stats.NewObjects == 0 || ver.m.Stats.NewObjectBytes*10 > ver.m.Stats.LogicalBytes {
			t.Fatalf("version %d: stats %+v: not a sparse delta", v, ver.m.Stats)
		}
	}
	if left := groupRecordNames(t, gs.pub); len(left) != 0 {
		t.Fatalf("records left after every version was published: %v", left)
	}
	// Each rank's copy holds its own files only: it never read another rank's.
	for r, s := range gs.ranks {
		var held []string
		filepath.WalkDir(filepath.Join(s.cache.dir, "materialized"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				held = append(held, filepath.Base(p))
			}
			return nil
		})
		for _, n := range held {
			if shardOwner(n, 4) != r {
				t.Errorf("rank %d's materialized copy holds %s, rank %d's file", r, n, shardOwner(n, 4))
			}
		}
		if len(held) == 0 {
			t.Errorf("rank %d's materialized copy is empty", r)
		}
	}
	// Readers are unchanged: a read-only store verifies the group's versions and exports
	// them as they were written.
	rd := openStore(t, gs.root, Options{ReadOnly: true})
	if rep, err := rd.Verify(nil); err != nil {
		t.Fatalf("verify: %v (%v)", err, rep.Damaged)
	}
	for i, files := range series {
		got := exportHashes(t, rd, uint64(i+1))
		wantH := map[string]string{}
		for n, b := range files {
			sum := sha256.Sum256(b)
			wantH[n] = hex.EncodeToString(sum[:])
		}
		sameTree(t, "export of a group's version", got, wantH)
	}
}

func groupRecordNames(t *testing.T, s *Store) []string {
	t.Helper()
	gr, err := s.groups.publisher.records()
	if err != nil {
		t.Fatal(err)
	}
	names, err := gr.ListRecords(RecordGroup)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// smallFiles are the files of a tiny version: one safetensors file per rank and a blob.
func smallFiles(t *testing.T, seed byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for k := 1; k <= 2; k++ {
		data := bytes.Repeat([]byte{seed, byte(k), 3, 4}, 1024)
		out[fmt.Sprintf("model-%05d-of-00002.safetensors", k)] = safetensorsFile(t, testTensor{name: fmt.Sprintf("w%d", k), dtype: "BF16", shape: []int64{2048}, data: data})
	}
	out["config.json"] = []byte(`{"seed": ` + string('0'+seed%10) + `}`)
	return out
}

func TestGroupRefusals(t *testing.T) {
	files := smallFiles(t, 1)
	mine := func(r int) func(string) bool { return func(n string) bool { return shardOwner(n, 2) == r } }
	cases := []struct {
		name  string
		setup func(t *testing.T, gs *groupStore)
		want  error
		names []string // in the message
	}{
		{"a file of two ranks", func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, mine(0))
			writeOK(t, gs.ranks[1], 1, files, func(n string) bool { return mine(1)(n) || n == "config.json" })
		}, ErrGroupConflict, []string{"config.json", "rank 0", "rank 1"}},
		{"a missing part", func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, mine(0))
		}, ErrGroupIncomplete, []string{"rank 1 of 2"}},
		{"a rank still writing", func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, mine(0))
			if _, err := gs.ranks[1].NewPart(1, "model-00002-of-00002.safetensors"); err != nil {
				t.Fatal(err)
			}
		}, ErrGroupIncomplete, []string{"rank 1 is writing"}},
		{"another version number", func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, mine(0))
			writeOK(t, gs.ranks[1], 2, files, mine(1))
		}, ErrGroupMismatch, []string{"rank 1 wrote version 2"}},
		{"another number of ranks", func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, mine(0))
			r1 := openRankAs(t, gs, Rank{Group: "g", Rank: 1, Ranks: 3})
			writeOK(t, r1, 1, files, mine(1))
		}, ErrGroupMismatch, []string{"rank 1", "3 ranks"}},
		{"a rank beyond W", func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, mine(0))
			writeOK(t, gs.ranks[1], 1, files, mine(1))
			r2 := openRankAs(t, gs, Rank{Group: "g", Rank: 2, Ranks: 3})
			writeOK(t, r2, 1, map[string][]byte{"extra.json": []byte("{}")}, func(string) bool { return true })
		}, ErrGroupMismatch, []string{"rank 2", "2 ranks"}},
		{"a damaged part", func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, mine(0))
			writeOK(t, gs.ranks[1], 1, files, mine(1))
			damageRecord(t, gs.root, "g/v000001/rank-1.part", func(b []byte) { b[len(b)/2] ^= 1 })
		}, ErrCorrupt, []string{"rank 1", "CRC"}},
		{"a part of an unknown format version", func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, mine(0))
			writeOK(t, gs.ranks[1], 1, files, mine(1))
			damageRecord(t, gs.root, "g/v000001/rank-0.part", func(b []byte) { b[4] = 2 })
		}, ErrUnsupportedVersion, []string{"rank 0", "format version 2"}},
		{"a part naming an object not stored", func(t *testing.T, gs *groupStore) {
			writeOK(t, gs.ranks[0], 1, files, mine(0))
			writeOK(t, gs.ranks[1], 1, files, mine(1))
			s := gs.ranks[1]
			rec := readPart(t, gs.pub, "g/v000001/rank-1.part")
			if err := s.be.DeleteObject(rec.Files[0].Tensors[0].ID); err != nil {
				t.Fatal(err)
			}
			// In packs: the rank's index and its packs are gone, so its objects are found
			// nowhere (a pack without its index would still be read from its own table).
			for _, n := range rec.Indexes {
				x, err := loadIndex(s.be.records, n)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range x.Packs {
					if err := s.be.given.(PackBackend).DeletePack(ID(p.ID)); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.be.records.DeleteRecord(RecordIndex, n); err != nil {
					t.Fatal(err)
				}
			}
		}, ErrCorrupt, []string{"rank 1", "not stored"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gs := newGroupStore(t, "g", 2)
			c.setup(t, gs)
			_, err := gs.pub.PublishGroup("g", 1, 2)
			if !errors.Is(err, c.want) {
				t.Fatalf("publish: %v, want %v", err, c.want)
			}
			for _, n := range c.names {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("error %q does not say %q", err, n)
				}
			}
			t.Log(err)
			if _, ok := gs.pub.Latest(); ok {
				t.Fatal("a refused version was published")
			}
			if vs, _ := gs.pub.be.ListManifests(); len(vs) != 0 {
				t.Fatalf("manifests %v after a refused publish", vs)
			}
			if errors.Is(c.want, ErrCorrupt) {
				// The store is sound, but a record or object is gone: the part's.
				gs.pub.AbortGroupVersion("g", 1)
			}
		})
	}
}

func writeOK(t *testing.T, s *Store, v uint64, files map[string][]byte, mine func(string) bool) {
	t.Helper()
	if _, err := writePart(s, v, files, mine); err != nil {
		t.Fatal(err)
	}
}

func openRankAs(t *testing.T, gs *groupStore, r Rank) *Store {
	t.Helper()
	for i, s := range gs.ranks {
		if s.groups.rank.Rank.Rank == r.Rank {
			s.Close()
			gs.ranks[i] = openRank(t, gs.root, r)
			return gs.ranks[i]
		}
	}
	return openRank(t, gs.root, r)
}

func damageRecord(t *testing.T, root, name string, damage func([]byte)) {
	t.Helper()
	p := filepath.Join(root, groupDir, filepath.FromSlash(name))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	damage(b)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readPart(t *testing.T, s *Store, name string) *partRecord {
	t.Helper()
	gr, _ := s.groups.publisher.records()
	b, err := gr.GetRecord(RecordGroup, name)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := parseRecordName(name)
	rec, err := decodePart(b, k)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// groupSeries is a generated sharded checkpoint series: versions of 4 shards, the index json
// and the model's config files (fixed seed).
func groupSeries(t *testing.T, versions int) []map[string][]byte {
	return testfiles.ShardedSeries(t, versions, 19)
}

// objectsDigest hashes every object's stored bytes (loose or in a pack) and every manifest
// (without the pack indexes it names, which differ between writers) of the store at root,
// read through a reader.
func objectsDigest(t *testing.T, root string) (string, int) {
	t.Helper()
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir()})
	var ids []ID
	if err := r.be.ListObjects(func(id ID, _ int64) error { ids = append(ids, id); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ids, func(a, b ID) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	for _, id := range ids {
		b, err := storedObject(r, id)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(id[:])
		h.Write(b)
	}
	n := len(ids)
	for _, info := range r.Versions() {
		ver, err := r.versions.loadVersion(info.Number)
		if err != nil {
			t.Fatal(err)
		}
		m := *ver.m
		m.Indexes = nil
		b, err := encodeManifest(&m)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
		n++
	}
	return hex.EncodeToString(h.Sum(nil)), n
}
