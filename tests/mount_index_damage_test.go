package tests

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// TestMountSurvivesDamagedIndex damages the index of a read-only mount's --cache-dir, once
// before the daemon starts and once under the running daemon (bbolt maps the file: the damage
// shows in its next lookup, in whichever goroutine makes it, the read-ahead's included), and
// reads every file of every version: the daemon stays up, the bytes are right, and its log
// says the index was recreated.
func TestMountSurvivesDamagedIndex(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	const versions = 3
	want := genCheckpoints(t, work, 300_000, versions)
	st, err := store.Open(storeDir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= versions; v++ {
		if _, err := st.Commit(srcDir(work, v), store.CommitOptions{Version: uint64(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(work, "ro-cache")
	indexPath := filepath.Join(cache, "index.db")
	readAll := func(t *testing.T, mnt string) {
		t.Helper()
		for v := 1; v <= versions; v++ {
			sameSums(t, v, sha256sumTree(t, versionDir(mnt, v)), want[v])
		}
	}
	mount := func(t *testing.T, name string) (*mountDaemon, string) {
		mnt := filepath.Join(work, name)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		return startMount(t, storeDir, mnt, "--read-only", "--cache-dir", cache), mnt
	}
	d, mnt := mount(t, "fill")
	readAll(t, mnt) // fills the index with every object
	d.stop()
	pristine, err := os.ReadFile(indexPath)
	if err != nil {
		t.Fatal(err)
	}
	const pageSize = 4096
	if len(pristine) < 4*pageSize {
		t.Fatalf("index of %d bytes: too small to damage", len(pristine))
	}
	// Random bytes over every page but the two meta pages: bbolt checks only those.
	damage := func(b []byte, at int64) {
		rng := rand.New(rand.NewPCG(uint64(at), 9))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}

	t.Run("before start", func(t *testing.T) {
		b := append([]byte(nil), pristine...)
		damage(b[2*pageSize:], 0)
		if err := os.WriteFile(indexPath, b, 0o600); err != nil {
			t.Fatal(err)
		}
		d, mnt := mount(t, "before")
		readAll(t, mnt)
		if !isServing(mnt) {
			t.Fatalf("the daemon died:\n%s", d.out.String())
		}
		d.stop()
		if !strings.Contains(d.out.String(), "deleted and recreated") {
			t.Errorf("the daemon's log does not say the index was recreated:\n%s", d.out.String())
		}
	})

	t.Run("while running", func(t *testing.T) {
		if err := os.WriteFile(indexPath, pristine, 0o600); err != nil {
			t.Fatal(err)
		}
		d, mnt := mount(t, "running")
		f, err := os.OpenFile(indexPath, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, len(pristine)-2*pageSize)
		damage(b, 1)
		if _, err := f.WriteAt(b, 2*pageSize); err != nil {
			t.Fatal(err)
		}
		f.Close()
		readAll(t, mnt)
		if !isServing(mnt) {
			t.Fatalf("the daemon died:\n%s", d.out.String())
		}
		d.stop()
		if !strings.Contains(d.out.String(), "deleted and recreated") {
			t.Errorf("the daemon's log does not say the index was recreated:\n%s", d.out.String())
		}
	})
}

func sameSums(t *testing.T, v int, got, want map[string]string) {
	t.Helper()
	for name, sum := range want {
		if got[name] != sum {
			t.Errorf("version %d: %s: sha256 %q, want %q", v, name, got[name], sum)
		}
	}
}
