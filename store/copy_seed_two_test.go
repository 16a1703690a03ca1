package store

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/logtest"
)

// TestTwoWritersKeepTheirSeeds writes two files at once while every core is busy with other
// work (as on a trainer's node, or with two shard writers on two cores): both streams' seeds
// must be adopted by the copy, not given up. A seed is bytes already in hand written to a fast
// disk; falling behind for want of a turn on a core is not the slow disk that giving up is
// for. The limit on the waits is cut to make the test short.
//
// A goroutine that writes the seed needs a turn on a core for each write, and on a machine
// whose cores are all busy it waited for one while the hasher waited for room in its queue:
// seedTurn makes each turn come 60 ms late, as on the 2-core machine with two writers. The
// asynchronous writer needs no turn (the hasher submits the writes).
func TestTwoWritersKeepTheirSeeds(t *testing.T) {
	old := seedMinWait
	seedMinWait = 300 * time.Millisecond
	seedTurn = func() { time.Sleep(60 * time.Millisecond) }
	t.Cleanup(func() { seedMinWait, seedTurn = old, nil })

	rng := rand.New(rand.NewPCG(20, 3))
	files := map[string][]byte{}
	for _, p := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		files[p] = safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{24 << 20}, bf16Like(rng, 24<<20)})
	}
	var log logLines
	s, _ := newStore(t, Options{Logger: logtest.New(log.logf)})

	// Other work on every core while the two files are written.
	var stop atomic.Bool
	var spin sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		spin.Go(func() {
			for x := uint64(1); !stop.Load(); x = x*6364136223846793005 + 1 {
			}
		})
	}
	w, err := s.NewVersion(1)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(files))
	streams := map[string]*FileStream{}
	for _, p := range sortedPaths(files) {
		st, err := w.StreamFile(p)
		if err != nil {
			t.Fatal(err)
		}
		streams[p] = st
		wg.Go(func() {
			b := files[p]
			for off := 0; off < len(b); off += 1 << 20 { // the kernel's 1 MiB FUSE writes
				if _, err := st.Write(b[off:min(len(b), off+1<<20)]); err != nil {
					errs <- err
					return
				}
			}
			errs <- st.Close()
		})
	}
	wg.Wait()
	stop.Store(true)
	spin.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range sortedPaths(files) {
		t.Logf("%s: the stream waited %v for its seed", p, streams[p].hs.seed.waited)
		if err := w.AddStream(p, streams[p], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	if err := s.mat.ensure(); err != nil {
		t.Fatal(err)
	}
	if log.has("seed", "given up") || !log.has("rebuilt at version 1 (2 of 2 files as streamed)") {
		t.Fatalf("a seed was given up; log:\n%s", log.String())
	}
	for p, b := range files {
		mustEqualBytes(t, "the copy of "+p, readMaterialized(t, s, p), b)
	}
}
