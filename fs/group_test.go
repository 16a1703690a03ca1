package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/store"
)

// TestGroupRankMounts: two mounts of one local store, each a rank of a writer group, write
// 3 versions of a 2-shard checkpoint, each its own shard (rank 0 also the index and config)
// through the streaming path; DONE's close in each returns once the writer, polling in the
// background, has published the version. A read-only mount then reads every version as
// written, and each rank's mount serves the other's shard.
func TestGroupRankMounts(t *testing.T) {
	canMount(t)
	root := filepath.Join(t.TempDir(), "store")
	if err := store.Init(root); err != nil {
		t.Fatal(err)
	}
	pub, err := store.Open(root, store.Options{Logger: logtest.New(t.Logf)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			if _, _, err := pub.PublishReady("g", 2); err != nil {
				t.Logf("publisher: %v", err)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-stopped })

	var mnts []string
	for r := range 2 {
		s, err := store.OpenRank(root, store.Rank{Group: "g", Rank: r, Ranks: 2}, store.Options{CacheDir: t.TempDir(), Logger: logtest.New(t.Logf)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		mnt, _ := mountTest(t, FromRank(s, 0), Options{})
		mnts = append(mnts, mnt)
	}
	rd, err := store.Open(root, store.Options{ReadOnly: true, Materialize: true, Logger: logtest.New(t.Logf)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	rdMnt, _ := mountTest(t, FromStore(rd), Options{ReadOnly: true})

	cfg := gen.ConfigForParams(200_000, 3e-6, 31)
	cfg.Shards = 2
	m, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for v := uint64(1); v <= 3; v++ {
		if v > 1 {
			m.Step()
		}
		files, err := m.CheckpointFiles()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		name := VersionName(v)
		for r, mnt := range mnts {
			if err := os.Mkdir(filepath.Join(mnt, name), 0o755); err != nil {
				t.Fatal(err)
			}
			for n, b := range files {
				owner := 0
				if n == "model-00002-of-00002.safetensors" {
					owner = 1
				}
				want[n] = fmt.Sprintf("644:%s", b)
				if owner == r {
					writeFile(t, filepath.Join(mnt, name, n), b)
				}
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, len(mnts))
		for r, mnt := range mnts {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = seal(filepath.Join(mnt, name)) }()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: close DONE of %s: %v", r, name, err)
			}
		}
		if latest, _ := pub.Latest(); latest != v {
			t.Fatalf("after both DONEs the latest version is %d, want %d", latest, v)
		}
		if info, err := pub.Version(v); err != nil || v > 1 && info.StoredBytes*10 > info.LogicalBytes {
			t.Fatalf("version %d: %+v (%v): not stored as deltas", v, info, err)
		}
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(rdMnt, name)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the read-only mount never showed %s", name)
			}
		}
		sameTree(t, "read-only mount, "+name, treeOf(t, filepath.Join(rdMnt, name)), want)
		for r, mnt := range mnts {
			sameTree(t, fmt.Sprintf("rank %d's mount, %s", r, name), treeOf(t, filepath.Join(mnt, name)), want)
		}
	}
}
