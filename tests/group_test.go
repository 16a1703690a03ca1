package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"
)

// TestGroupMountsCLI: two `weightfs mount --group g --rank R --ranks 2` daemons of one local
// store (rank 0 also --publish) write 3 versions of a 2-shard checkpoint, each its own shard
// (rank 0 also the index and config), and close DONE in both; each close returns once the
// version is published, and a read-only daemon then reads the version as written, through
// sha256sum(1). The store verifies at the end.
func TestGroupMountsCLI(t *testing.T) {
	skipWithoutFUSE(t)
	dir := t.TempDir()
	storeDir := filepath.Join(dir, "store")
	initStore(t, storeDir)
	want := genCheckpoints(t, dir, 300_000, 3)
	var mnts []string
	var daemons []*mountDaemon
	for r := range 2 {
		mnt := filepath.Join(dir, fmt.Sprintf("rank%d", r))
		os.Mkdir(mnt, 0o755)
		flags := []string{"--group", "g", "--rank", fmt.Sprint(r), "--ranks", "2", "--cache-dir", filepath.Join(dir, fmt.Sprintf("cache%d", r))}
		if r == 0 {
			flags = append(flags, "--publish", "--publish-poll", "20ms")
		}
		daemons = append(daemons, startMount(t, storeDir, mnt, flags...))
		mnts = append(mnts, mnt)
	}
	rdMnt := filepath.Join(dir, "reader")
	os.Mkdir(rdMnt, 0o755)
	startMount(t, storeDir, rdMnt, "--read-only", "--poll", "50ms")
	for v := 1; v <= 3; v++ {
		src := srcDir(dir, v)
		entries, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for r, mnt := range mnts {
			vdir := versionDir(mnt, v)
			if err := os.Mkdir(vdir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				owner := 0
				if e.Name() == "model-00002-of-00002.safetensors" {
					owner = 1
				}
				if owner != r {
					continue
				}
				b, err := os.ReadFile(filepath.Join(src, e.Name()))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(vdir, e.Name()), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, len(mnts))
		for r, mnt := range mnts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := os.Create(filepath.Join(versionDir(mnt, v), "DONE"))
				if err == nil {
					err = f.Close()
				}
				errs[r] = err
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: DONE of version %d: %v\n%s", r, v, err, daemons[r].out.String())
			}
		}
		for deadline := time.Now().Add(hangLimit); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(versionDir(rdMnt, v)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the read-only mount never showed version %d", v)
			}
		}
		if got := sha256sumTree(t, versionDir(rdMnt, v)); !reflect.DeepEqual(got, want[v]) {
			t.Fatalf("version %d read through the read-only mount: %v, want %v", v, got, want[v])
		}
	}
	for _, d := range daemons {
		d.stop()
	}
	verifyStore(t, storeDir)
}
