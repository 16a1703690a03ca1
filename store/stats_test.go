package store

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// statsObserver records what a Store tells its Observer.
type statsObserver struct {
	mu     sync.Mutex
	sealed []VersionInfo
	seen   []uint64
}

func (o *statsObserver) Sealed(info VersionInfo, seal, ingest time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sealed = append(o.sealed, info)
}

func (o *statsObserver) Seen(info VersionInfo, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, info.Number)
}

// TestStatsCountWhatTheStoreDid: the seal counts of Stats are the sums of the versions'
// own summaries, files are counted by the path that took them, a reader counts the versions
// its Refresh found (not those it opened with), and NewerVersions says how far behind the
// latest a version is.
func TestStatsCountWhatTheStoreDid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	obs := &statsObserver{}
	s, root := newStore(t, Options{Observer: obs})
	w1 := bf16Like(rng, 4096)
	v1 := map[string][]byte{
		"model.safetensors": safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{4096}, w1}),
		"config.json":       []byte(`{"layers": 1}`),
	}
	info1, _ := commitTree(t, s, 1, v1)
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), Observer: obs})

	v2 := map[string][]byte{
		"model.safetensors": safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{4096}, perturb(rng, w1, 2, 0.01)}),
		"config.json":       []byte(`{"layers": 2}`),
		"notes.txt":         []byte("streamed"),
	}
	sealStreamed(t, s, 2, v2, rng)
	info2, err := s.Version(2)
	if err != nil {
		t.Fatal(err)
	}
	info3, _ := commitTree(t, s, 5, v1)

	st := s.Stats()
	want := Stats{
		VersionsSealed:     3,
		SealedLogicalBytes: info1.LogicalBytes + info2.LogicalBytes + info3.LogicalBytes,
		SealedStoredBytes:  info1.StoredBytes + info2.StoredBytes + info3.StoredBytes,
		FilesStreamed:      int64(len(v2)),
		FilesStaged:        int64(2 * len(v1)),
	}
	got := st
	got.CopyHits, got.CopyMisses, got.PageHits, got.PageMisses, got.RenderHits, got.RenderMisses = 0, 0, 0, 0, 0, 0
	got.Fsyncs, got.IndexWrites = 0, 0 // TestStatsFsyncsOfACommit
	if got != want {
		t.Errorf("writer Stats %+v, want %+v", got, want)
	}
	if len(obs.sealed) != 3 || obs.sealed[2].Number != 5 {
		t.Errorf("observer told of seals %+v, want versions 1, 2, 5", obs.sealed)
	}

	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(); err != nil { // nothing new: nothing counted
		t.Fatal(err)
	}
	if got := r.Stats(); got.VersionsSeen != 2 || got.VersionsSealed != 0 {
		t.Errorf("reader Stats %+v, want 2 versions seen (2 and 5), none sealed", got)
	}
	if len(obs.seen) != 2 || obs.seen[0] != 2 || obs.seen[1] != 5 {
		t.Errorf("observer told of versions seen %v, want [2 5]", obs.seen)
	}
	for _, c := range []struct {
		v    uint64
		want int
	}{{0, 3}, {1, 2}, {2, 1}, {3, 1}, {5, 0}, {6, 0}} {
		if got := r.NewerVersions(c.v); got != c.want {
			t.Errorf("NewerVersions(%d) = %d, want %d", c.v, got, c.want)
		}
	}
	readWhole(t, r, 5, "model.safetensors")
	if got := r.Stats(); got.CopyHits+got.CopyMisses+got.PageHits+got.PageMisses == 0 {
		t.Errorf("a read counted no cache lookup: %+v", got)
	}
}
