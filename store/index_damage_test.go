package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"

	bolt "go.etcd.io/bbolt"

	"github.com/weightfs/weightfs/delta"
)

// indexRebuiltLog is what the log says when the index was found damaged and rebuilt.
const indexRebuiltLog = "deleted and recreated"

// damageFixture is a store of four versions of two files (each version a few percent changed,
// so reads of old versions replay deltas and consult the index for every object), with the
// bytes of every file of every version.
type damageFixture struct {
	root  string
	files map[uint64]map[string][]byte
}

func newDamageFixture(t *testing.T) *damageFixture {
	rng := rand.New(rand.NewPCG(9, 9))
	s, root := newStore(t, Options{})
	fx := &damageFixture{root: root, files: map[uint64]map[string][]byte{}}
	a, b := bf16Like(rng, 1<<20), bf16Like(rng, 3<<19)
	for v := uint64(1); v <= 4; v++ {
		files := map[string][]byte{
			"model.safetensors": safetensorsFile(t,
				testTensor{"a", delta.DTypeBF16, []int64{1 << 20}, a},
				testTensor{"b", delta.DTypeBF16, []int64{3 << 19}, b}),
			"sub/other.safetensors": safetensorsFile(t, testTensor{"c", delta.DTypeBF16, []int64{3 << 19}, b}),
			"config.json":           fmt.Appendf(nil, `{"v": %d}`, v),
		}
		commitTree(t, s, v, files)
		fx.files[v] = files
		a, b = perturb(rng, a, 2, 0.03), perturb(rng, b, 2, 0.02)
	}
	if err := closeStore(t, s); err != nil {
		t.Fatal(err)
	}
	return fx
}

// readAll reads every file of every version from several goroutines at once, in 256 KiB
// reads from the start (sequential: the read-ahead builds pages in goroutines of its own),
// and fails the test on any wrong byte.
func (fx *damageFixture) readAll(t *testing.T, s *Store) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for v, files := range fx.files {
		for p, want := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- readCompare(s, v, p, want)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func readCompare(s *Store, v uint64, p string, want []byte) error {
	f, err := s.OpenFile(v, p)
	if err != nil {
		return fmt.Errorf("open %s of version %d: %w", p, v, err)
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for off := int64(0); off < int64(len(want)); off += int64(len(buf)) {
		n, err := f.ReadAt(buf, off)
		if end := min(off+int64(len(buf)), int64(len(want))); int64(n) != end-off {
			return fmt.Errorf("read %s of version %d at %d: %d bytes: %v", p, v, off, n, err)
		}
		if string(buf[:n]) != string(want[off:off+int64(n)]) {
			return fmt.Errorf("read %s of version %d at %d: wrong bytes", p, v, off)
		}
	}
	return nil
}

// indexPages returns the ids of the pages of the bbolt file at path that hold data (branch,
// leaf and freelist pages: the ones a damage is noticed in), and the page size.
func indexPages(t *testing.T, path string) ([]int, int) {
	t.Helper()
	// A copy: the file may be open (and locked) by a store.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "index-copy.db")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(cp, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ids []int
	err = db.View(func(tx *bolt.Tx) error {
		for id := 2; ; id++ {
			info, err := tx.Page(id)
			if err != nil {
				return err
			}
			if info == nil {
				return nil
			}
			if info.Type == "branch" || info.Type == "leaf" || info.Type == "freelist" {
				ids = append(ids, id)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids, db.Info().PageSize
}

// indexDamages are ways of damaging a bbolt file of the given bytes (pages: its data pages):
// each returns the damaged file and whether reading the index must notice it. drawn: the
// damage draws from rng (a trial with another seed damages other bytes); the others damage
// the same bytes whatever the seed.
var indexDamages = []struct {
	name    string
	noticed bool
	drawn   bool
	damage  func(rng *rand.Rand, b []byte, pages []int, pageSize int) []byte
}{
	{"byte flips", false, true, func(rng *rand.Rand, b []byte, pages []int, pageSize int) []byte {
		for range 64 {
			i := 2*pageSize + rng.IntN(len(b)-2*pageSize)
			b[i] ^= byte(1 + rng.IntN(255))
		}
		return b
	}},
	{"random page", true, true, func(rng *rand.Rand, b []byte, pages []int, pageSize int) []byte {
		p := pages[rng.IntN(len(pages))]
		copy(b[p*pageSize:(p+1)*pageSize], randomBytes(rng, pageSize))
		return b
	}},
	{"zeroed pages", true, false, func(rng *rand.Rand, b []byte, pages []int, pageSize int) []byte {
		for _, p := range pages {
			clear(b[p*pageSize+8 : (p+1)*pageSize]) // the page id stays, its type and contents go
		}
		return b
	}},
	{"zeroed page", true, false, func(rng *rand.Rand, b []byte, pages []int, pageSize int) []byte {
		p := pages[len(pages)-1]
		clear(b[p*pageSize : (p+1)*pageSize])
		return b
	}},
	{"truncated to the metas", true, false, func(rng *rand.Rand, b []byte, pages []int, pageSize int) []byte {
		return b[:2*pageSize]
	}},
	{"truncated before the last data page", true, false, func(rng *rand.Rand, b []byte, pages []int, pageSize int) []byte {
		return b[:pages[len(pages)-1]*pageSize]
	}},
	{"meta pages zeroed", true, false, func(rng *rand.Rand, b []byte, pages []int, pageSize int) []byte {
		clear(b[:2*pageSize])
		return b
	}},
}

// TestIndexDamageRebuilds damages the index of a reader (with its own cache directory) and
// of the writer in each of indexDamages' ways (those drawn from a seed several times over),
// then opens the store and reads every file of every version from many goroutines at once
// (the read-ahead's included): no panic may escape, every byte must be right, and a damage
// that matters must be logged as rebuilt.
func TestIndexDamageRebuilds(t *testing.T) {
	fx := newDamageFixture(t)
	readerCache := filepath.Join(t.TempDir(), "reader-cache")
	r := openStore(t, fx.root, Options{ReadOnly: true, CacheDir: readerCache})
	fx.readAll(t, r) // fills the reader's index with every object
	closeStore(t, r)
	for _, who := range []string{"reader", "writer"} {
		indexPath := filepath.Join(readerCache, "index.db")
		if who == "writer" {
			indexPath = filepath.Join(fx.root, "cache", "index.db")
		}
		pristine, err := os.ReadFile(indexPath)
		if err != nil {
			t.Fatal(err)
		}
		pages, pageSize := indexPages(t, indexPath)
		if len(pages) < 3 {
			t.Fatalf("%s's index has %d data pages: too few to damage", who, len(pages))
		}
		for _, d := range indexDamages {
			// A damage that does not draw from the seed is the same file in every trial:
			// it runs once.
			trials := 1
			if d.drawn {
				trials = 3
			}
			for trial := range trials {
				t.Run(fmt.Sprintf("%s/%s/%d", who, d.name, trial), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(trial), 15))
					damaged := d.damage(rng, append([]byte(nil), pristine...), pages, pageSize)
					if err := os.WriteFile(indexPath, damaged, 0o600); err != nil {
						t.Fatal(err)
					}
					log := &logLines{t: t}
					opts := Options{ReadOnly: true, CacheDir: readerCache, Logger: logtest.New(log.logf)}
					if who == "writer" {
						opts = Options{Logger: logtest.New(log.logf)}
					}
					s := openStore(t, fx.root, opts)
					for range 2 {
						fx.readAll(t, s)
					}
					if d.noticed && !log.has(indexRebuiltLog) {
						t.Errorf("the log does not say the damaged index was rebuilt (%q)", indexRebuiltLog)
					}
					if len(s.Versions()) != len(fx.files) {
						t.Errorf("%d versions listed, want %d", len(s.Versions()), len(fx.files))
					}
					if err := closeStore(t, s); err != nil {
						t.Errorf("close: %v", err)
					}
				})
			}
		}
		if err := os.WriteFile(indexPath, pristine, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIndexDamageWhileOpen damages the index file under an open reader (bbolt maps the file:
// the damage shows in its next transaction) and reads every version again from many
// goroutines: no panic escapes, the bytes are right, the index is rebuilt and logged.
func TestIndexDamageWhileOpen(t *testing.T) {
	fx := newDamageFixture(t)
	log := &logLines{t: t}
	cache := filepath.Join(t.TempDir(), "cache")
	s := openStore(t, fx.root, Options{ReadOnly: true, CacheDir: cache, Logger: logtest.New(log.logf)})
	fx.readAll(t, s)
	s.objects.flushMetas()
	indexPath := filepath.Join(cache, "index.db")
	pages, pageSize := indexPages(t, indexPath)
	f, err := os.OpenFile(indexPath, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range pages {
		if _, err := f.WriteAt(randomBytes(rng, pageSize), int64(p*pageSize)); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	// Forget what memory holds in front of the index, so reads go to it.
	s.objects.metaMu.Lock()
	clear(s.objects.metas)
	s.objects.metaMu.Unlock()
	s.objects.objInfos.clear()
	s.objects.pages.clear()
	s.objects.deltas.clear()
	s.objects.blocks.clear()
	fx.readAll(t, s)
	if err := s.Refresh(); err != nil {
		t.Errorf("refresh: %v", err)
	}
	fx.readAll(t, s)
	if !log.has(indexRebuiltLog) {
		t.Errorf("the log does not say the damaged index was rebuilt (%q)", indexRebuiltLog)
	}
}

// TestIndexCheckedAfterUncleanClose: an index left open by a process that died is checked
// with bbolt's consistency check before use, so damage is found at open, not by a read.
func TestIndexCheckedAfterUncleanClose(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "index.db")
	ix, err := openIndex(path, indexOwner{Store: "test", Own: true}, logtest.New(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	metas := map[ID]objMeta{}
	for i := range 2000 {
		metas[ID{byte(i), byte(i >> 8), 1}] = objMeta{Kind: kindFull, Width: 2, ContentLen: int64(i)}
	}
	if err := ix.putObjects(metas); err != nil {
		t.Fatal(err)
	}
	// The file as a crash leaves it: marked open.
	crashed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.close(); err != nil {
		t.Fatal(err)
	}
	pages, pageSize := indexPages(t, path)
	for _, tc := range []struct {
		name    string
		file    []byte
		checked bool
	}{{"clean", nil, false}, {"crashed", crashed, false}, {"crashed and damaged", crashed, true}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.file != nil {
				b := append([]byte(nil), tc.file...)
				if tc.checked {
					p := pages[len(pages)-1]
					clear(b[p*pageSize+8 : (p+1)*pageSize])
				}
				if err := os.WriteFile(path, b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			log := &logLines{t: t}
			ix, err := openIndex(path, indexOwner{Store: "test", Own: true}, logtest.New(log.logf))
			if err != nil {
				t.Fatal(err)
			}
			defer ix.close()
			if got := log.has("consistency check after an unclean close"); got != tc.checked {
				t.Errorf("damage found by the check at open: %v, want %v", got, tc.checked)
			}
			if got, want := ix.recreated.Load(), map[bool]int64{false: 0, true: 1}[tc.checked]; got != want {
				t.Errorf("recreated %d times at open, want %d", got, want)
			}
		})
	}
}

// TestIndexRunsWithoutWhenItCannotBeRecreated: an index found damaged whose file cannot be
// replaced leaves the store running without one (lookups miss, writes are dropped, no error),
// logged, and it is recreated at a later call once that is possible.
func TestIndexRunsWithoutWhenItCannotBeRecreated(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "index.db")
	log := &logLines{t: t}
	ix, err := openIndex(path, indexOwner{Store: "test", Own: true}, logtest.New(log.logf))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.close()
	id := ID{1, 2, 3}
	if err := ix.putObjects(map[ID]objMeta{id: {Kind: kindFull, Width: 2, ContentLen: 5}}); err != nil {
		t.Fatal(err)
	}
	// The open file moves away and is damaged where it is; a directory that cannot be
	// removed takes its name.
	moved := filepath.Join(dir, "moved.db")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(moved)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(moved, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, len(b)-2*4096), 2*4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, ok := ix.object(id); ok {
		t.Fatal("a damaged index answered a lookup")
	}
	if !log.has("running without it") {
		t.Fatalf("the log does not say the store runs without an index")
	}
	if err := ix.putObjects(map[ID]objMeta{id: {Kind: kindFull, Width: 2, ContentLen: 5}}); err != nil {
		t.Errorf("a write without an index: %v, want it dropped", err)
	}
	if got := ix.materialized(); got != (matState{}) {
		t.Errorf("copy state without an index: %+v", got)
	}
	// Once the name is free again, a later call recreates the index.
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	ix.mu.Lock()
	ix.retryAt = time.Time{}
	ix.mu.Unlock()
	if err := ix.putObjects(map[ID]objMeta{id: {Kind: kindFull, Width: 2, ContentLen: 5}}); err != nil {
		t.Fatal(err)
	}
	if m, ok := ix.object(id); !ok || m.ContentLen != 5 {
		t.Errorf("after the index was recreated: %+v %v", m, ok)
	}
	if !log.has("recreated") {
		t.Errorf("the log does not say the index was recreated")
	}
}
