package tests

import (
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

// smallStore commits n versions of a small generated model and returns the store directory
// and each version's file hashes.
func smallStore(t *testing.T, params int64, n int) (string, map[uint64]map[string]string) {
	t.Helper()
	storeDir := filepath.Join(t.TempDir(), "store")
	mustCLI(t, "init", storeDir)
	m, err := gen.New(gen.ConfigForParams(params, 3e-6, 11))
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]map[string]string{}
	for v := uint64(1); v <= uint64(n); v++ {
		if v > 1 {
			m.Step()
		}
		src := filepath.Join(t.TempDir(), fmt.Sprintf("v%d", v))
		if err := m.WriteCheckpoint(src); err != nil {
			t.Fatal(err)
		}
		want[v] = treeHashes(t, src)
		mustCLI(t, "commit", "--version", fmt.Sprint(v), storeDir, src)
	}
	return storeDir, want
}

// objectFiles lists every object file of a store.
func objectFiles(t *testing.T, storeDir string) []string {
	t.Helper()
	var objs []string
	filepath.WalkDir(filepath.Join(storeDir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			objs = append(objs, p)
		}
		return nil
	})
	if len(objs) == 0 {
		t.Fatal("the store has no object files under objects/")
	}
	return objs
}

// TestFlippedByteInAnyObject flips one byte in every object in turn: verify must fail and
// name the object, and export must never write a wrong byte.
func TestFlippedByteInAnyObject(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it reads loose object files (store format 2's layout)
	storeDir, want := smallStore(t, 300_000, 3)
	rng := rand.New(rand.NewSource(1))
	for _, obj := range objectFiles(t, storeDir) {
		name := filepath.Base(obj)
		orig, err := os.ReadFile(obj)
		if err != nil {
			t.Fatal(err)
		}
		damaged := append([]byte(nil), orig...)
		pos := rng.Intn(len(damaged))
		damaged[pos] ^= 1 << uint(rng.Intn(8))
		if err := os.WriteFile(obj, damaged, 0o444); err != nil {
			t.Fatal(err)
		}

		r := runCLI(t, "verify", storeDir)
		if r.code == 0 {
			t.Errorf("verify passed with byte %d of object %s flipped", pos, name)
		} else if !strings.Contains(r.stdout+r.stderr, name) {
			t.Errorf("verify failed but did not name object %s:\n%s%s", name, r.stdout, r.stderr)
		}
		failed := 0
		for v := uint64(1); v <= 3; v++ {
			out := filepath.Join(t.TempDir(), "out")
			r := runCLI(t, "export", storeDir, fmt.Sprint(v), out)
			got := treeHashes(t, out)
			for f, h := range got {
				if want[v][f] != h {
					t.Errorf("object %s damaged: export of v%d wrote %s with wrong bytes", name, v, f)
				}
			}
			if r.code != 0 {
				failed++
				if !strings.Contains(r.stderr, "corrupt") && !strings.Contains(r.stderr, "damage") {
					t.Errorf("export of v%d failed without a clear message: %s", v, r.stderr)
				}
			}
		}
		if failed == 0 {
			t.Errorf("object %s damaged, yet every version exported", name)
		}
		if err := os.WriteFile(obj, orig, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	mustCLI(t, "verify", storeDir)
}

// TestKill9DuringCommit kills `weightfs commit` at random points: the store must open, every
// earlier version export bit-identically, and the interrupted version be absent or complete.
func TestKill9DuringCommit(t *testing.T) {
	const trials = 20
	params := int64(8_000_000)
	storeDir := filepath.Join(t.TempDir(), "store")
	mustCLI(t, "init", storeDir)
	m, err := gen.New(gen.ConfigForParams(params, 3e-6, 5))
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]map[string]string{}
	srcOf := func(v uint64) string {
		src := filepath.Join(t.TempDir(), fmt.Sprintf("v%d", v))
		if err := m.WriteCheckpoint(src); err != nil {
			t.Fatal(err)
		}
		want[v] = treeHashes(t, src)
		return src
	}
	mustCLI(t, "commit", storeDir, srcOf(1), "--version", "1")
	m.Step()
	start := time.Now()
	mustCLI(t, "commit", storeDir, srcOf(2), "--version", "2")
	full := time.Since(start)

	rng := rand.New(rand.NewSource(42))
	sealed := []uint64{1, 2}
	for trial := 0; trial < trials; trial++ {
		v := uint64(3 + trial)
		m.Step()
		src := srcOf(v)
		cmd := weightfsCommand(weightfsBin(t), "commit", storeDir, src, "--version", fmt.Sprint(v))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.Int63n(int64(full) * 12 / 10)))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		r := mustCLI(t, "log", storeDir)
		present := strings.Contains(r.stdout, fmt.Sprintf("weight_v%06d", v))
		check := []uint64{1, sealed[len(sealed)-1]}
		if present {
			sealed = append(sealed, v)
			check = append(check, v)
		}
		for _, cv := range check {
			out := filepath.Join(t.TempDir(), "out")
			mustCLI(t, "export", storeDir, fmt.Sprint(cv), out)
			sameHashes(t, fmt.Sprintf("trial %d: v%d", trial, cv), treeHashes(t, out), want[cv])
		}
		os.RemoveAll(src)
	}
	t.Logf("%d of %d interrupted commits had completed", len(sealed)-2, trials)
	mustCLI(t, "verify", storeDir)
	for _, v := range sealed {
		out := filepath.Join(t.TempDir(), "final")
		mustCLI(t, "export", storeDir, fmt.Sprint(v), out)
		sameHashes(t, fmt.Sprintf("final v%d", v), treeHashes(t, out), want[v])
		os.RemoveAll(out)
	}
}

// TestDiffCountsMatchTheStore checks `weightfs diff` against the changed-element counts the
// store recorded at commit, and against itself in the other direction.
func TestDiffCountsMatchTheStore(t *testing.T) {
	storeDir, _ := smallStore(t, 300_000, 3)
	st, err := store.Open(storeDir, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	infos := st.Versions()
	st.Close()
	total := func(out string) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "total" {
				return f[1] + "/" + f[2]
			}
		}
		t.Fatalf("no total line in:\n%s", out)
		return ""
	}
	for _, v := range infos[1:] {
		got := total(mustCLI(t, "diff", storeDir, fmt.Sprint(v.Number-1), fmt.Sprint(v.Number)).stdout)
		want := fmt.Sprintf("%d/%d", v.ChangedElems, v.TotalElems)
		if got != want || v.ChangedElems == 0 {
			t.Errorf("diff v%d v%d: changed/total %s, the store recorded %s", v.Number-1, v.Number, got, want)
		}
		if back := total(mustCLI(t, "diff", storeDir, fmt.Sprint(v.Number), fmt.Sprint(v.Number-1)).stdout); back != got {
			t.Errorf("diff in the other direction: %s, want %s", back, got)
		}
	}
}
