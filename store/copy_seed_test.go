package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
)

// TestForwardAdoptsSeeds streams a series of versions in writes of random sizes: every
// changed file of each new version reaches the copy as the seed its stream wrote (a rename,
// not an update in place), the copy holds exactly the bytes written, no seed is left behind,
// and the store verifies.
func TestForwardAdoptsSeeds(t *testing.T) {
	versions := streamSeries(t, 4, 7)
	var log logLines
	s, _ := newStore(t, Options{MaxChain: 2, Logger: logtest.New(log.logf)})
	rng := rand.New(rand.NewPCG(7, 8))
	for i, files := range versions {
		v := uint64(i + 1)
		sealStreamed(t, s, v, files, rng)
		if err := s.mat.ensure(); err != nil {
			t.Fatal(err)
		}
		if v > 1 {
			changed := 0
			for p, b := range files {
				if !bytes.Equal(b, versions[i-1][p]) {
					changed++
				}
			}
			if want := fmt.Sprintf("brought forward to version %d (%d of %d changed files as streamed)", v, changed, changed); !log.has(want) {
				t.Errorf("v%d: no line %q; log:\n%s", v, want, log.String())
			}
		}
		for p, b := range files {
			mustEqualBytes(t, fmt.Sprintf("v%d: the copy of %s", v, p), readMaterialized(t, s, p), b)
		}
		if left, _ := os.ReadDir(filepath.Join(s.cache.dir, "seed")); len(left) != 0 {
			t.Errorf("v%d: %d seed files left behind", v, len(left))
		}
	}
	checkAllVersions(t, "streamed", s, versions)
	if _, err := s.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedSeedIsNotServed flips a byte of a seed before the copy adopts it: the copy's
// reads check it against the sums of the bytes the stream received, so the read is served
// from the objects, the damage is logged, and the copy is rebuilt.
func TestDamagedSeedIsNotServed(t *testing.T) {
	versions := modelVersions(t, 2, 45)
	var log logLines
	s, _ := newStore(t, Options{Logger: logtest.New(log.logf)})
	rng := rand.New(rand.NewPCG(1, 2))
	sealStreamed(t, s, 1, versions[0], rng)
	if err := s.mat.ensure(); err != nil {
		t.Fatal(err)
	}
	// Between the manifest and the copy's update, the largest seed (model.safetensors's) is
	// damaged.
	damaged := false
	s.hook = func(point string) error {
		if point != "seal-index-updated" || damaged {
			return nil
		}
		damaged = true
		var big string
		var size int64
		entries, err := os.ReadDir(filepath.Join(s.cache.dir, "seed"))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if info, err := e.Info(); err == nil && info.Size() > size {
				big, size = filepath.Join(s.cache.dir, "seed", e.Name()), info.Size()
			}
		}
		if want := int64(len(versions[1]["model.safetensors"])); size != want {
			return fmt.Errorf("largest seed has %d bytes, model.safetensors %d", size, want)
		}
		b, err := os.ReadFile(big)
		if err != nil {
			return err
		}
		b[1_000_000] ^= 0x10
		return os.WriteFile(big, b, 0o600)
	}
	sealStreamed(t, s, 2, versions[1], rng)
	s.hook = nil
	if !damaged || !log.has("brought forward to version 2", "as streamed") {
		t.Fatalf("the seal did not adopt the damaged seed; log:\n%s", log.String())
	}
	if err := s.mat.ensure(); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "v2 read over a damaged seed", readWhole(t, s, 2, "model.safetensors"), versions[1]["model.safetensors"])
	if !log.has("model.safetensors: chunk", "its sums say") {
		t.Errorf("the damaged seed was not caught; log:\n%s", log.String())
	}
	s.mat.bg.Wait()
	if err := s.mat.ensure(); err != nil {
		t.Fatal(err)
	}
	for p, want := range versions[1] {
		mustEqualBytes(t, "the copy once rebuilt: "+p, readMaterialized(t, s, p), want)
	}
}

// TestSeedFileWrites feeds a seed file pieces of random sizes, from memory aligned like the
// file (chunks) and not (a header's bytes), and checks the file holds exactly the bytes, with
// the asynchronous writer and the goroutine's (the reference): the same bytes.
func TestSeedFileWrites(t *testing.T) {
	for _, c := range []struct {
		async bool
		seed  uint64
	}{{true, 1}, {true, 2}, {true, 3}, {true, 4}, {false, 1}, {false, 2}, {false, 3}, {false, 4}} {
		seed := c.seed
		t.Run(fmt.Sprintf("async=%v/%d", c.async, seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 5))
			want := randomBytes(rng, 3<<20+rng.IntN(70_000))
			w, pool := testSeedWriter(t, t.TempDir(), c.async)
			for off := 0; off < len(want); {
				n := min(len(want)-off, 1+rng.IntN(700_000))
				if rng.IntN(4) == 0 {
					n = min(n, 1+rng.IntN(5000))
				}
				var c *chunk
				data := append([]byte(nil), want[off:off+n]...) // anywhere in memory
				if rng.IntN(3) > 0 {
					c = pool.get(filePad(int64(off))) // aligned like the file, as the stream's
					copy(c.buf, want[off:off+n])
					data = c.buf[:n]
					c.refs.Store(1)
				}
				w.put(c, data)
				if w.gaveUp || !w.async && w.q == nil {
					t.Fatal("the seed was given up")
				}
				off += n
			}
			sd, entry := finishTestSeed(t, w, pool, int64(len(want)))
			p, ok := sd.takePath(entry)
			if !ok {
				t.Fatal("no seed offered")
			}
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, "seed", got, want)
		})
	}
}

// TestSeedGivenUp: a seed whose queue is full is given up, its file removed and nothing
// offered; the chunk's reference comes back to the pool.
func TestSeedGivenUp(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "seed-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	pool := newChunkPool(1)
	done := make(chan struct{})
	close(done) // no goroutine: nobody receives
	w := &seedWriter{pool: pool, file: &seedFile{f: f}, q: make(chan seedPiece), done: done, start: time.Now().Add(-time.Hour)}
	w.waited = time.Hour / 4 // its waits used up the quarter of its time
	c := pool.get(0)
	c.refs.Store(1)
	w.put(c, c.buf[:10])
	if !w.gaveUp || w.q != nil {
		t.Fatal("the seed was not given up")
	}
	if len(pool.sem) != 0 {
		t.Error("the chunk was not given back to the pool")
	}
	sd := &seeds{dir: t.TempDir(), byHash: map[seedKey]seedFileRef{}}
	if !w.finish(sd, &manifestFile{Size: 10}, 10, 1) {
		t.Error("finish does not say the seed was given up")
	}
	if len(sd.byHash) != 0 {
		t.Error("a given-up seed was offered")
	}
	if _, err := os.Stat(f.Name()); !os.IsNotExist(err) {
		t.Errorf("the given-up seed's file is still there: %v", err)
	}
}

// testSeedWriter starts a seed in a new file under dir, with (async) or without the
// asynchronous writes, on a pool of four chunks.
func testSeedWriter(t *testing.T, dir string, async bool) (*seedWriter, *chunkPool) {
	t.Helper()
	old := seedAsync
	seedAsync = async
	t.Cleanup(func() { seedAsync = old })
	f, err := os.CreateTemp(dir, "seed-*")
	if err != nil {
		t.Fatal(err)
	}
	pool := newChunkPool(4)
	w := &seedWriter{pool: pool}
	w.startSeed(f, pool)
	t.Logf("O_DIRECT: %v, asynchronous: %v", w.file.direct, w.async)
	return w, pool
}

// finishTestSeed ends testSeedWriter's seed of size bytes as the file ID{1} of version 1,
// in a seeds directory of its own, and checks that every chunk went back to the pool.
func finishTestSeed(t *testing.T, w *seedWriter, pool *chunkPool, size int64) (*seeds, *manifestFile) {
	t.Helper()
	entry := &manifestFile{SHA256: ID{1}, Size: size}
	sd := &seeds{dir: t.TempDir(), byHash: map[seedKey]seedFileRef{}}
	w.finish(sd, entry, size, 1)
	if len(pool.sem) != 0 {
		t.Errorf("%d chunks not given back to the pool", len(pool.sem))
	}
	return sd, entry
}
