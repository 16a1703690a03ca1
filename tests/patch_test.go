package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

// The engine-side deltas (docs/format.md Part III), end to end: versions sealed through a real mount, their
// patches (MNT/patches/) applied in place with `weightfs apply` and with the reference Python
// apply, and their slime deltas (MNT/deltas/, see slime_test.go) replayed by a reader written
// from the design alone. Every claim is checked by SHA-256.

// chainVersions is the length of the generated chain.
const chainVersions = 20

// patchName is the file name of version v's patch in MNT/patches/.
func patchName(v int) string { return fmt.Sprintf("weight_v%06d.safetensors", v) }

// sealChain generates n versions of a model (gen, lr 3e-6, two shards) and seals each through
// the read-write mount at rw as a trainer would: cp -r into weight_vNNNNNN, then touch DONE.
// It returns each version's file hashes.
func sealChain(t *testing.T, work, rw string, params int64, n int) map[int]map[string]string {
	t.Helper()
	return genSeries(t, work, params, 23, n, func(v int, src string) {
		run(t, "cp", "-r", src, versionDir(rw, v))
		run(t, "touch", filepath.Join(versionDir(rw, v), "DONE"))
		os.RemoveAll(src)
	})
}

// TestEngineDeltas seals 20 generated versions through a read-write mount, mounts the store
// read-only too, and checks everything an engine holding version N does to reach N+1.
func TestEngineDeltas(t *testing.T) {
	skipWithoutFUSE(t)
	params := int64(6_000_000)
	if testing.Short() {
		params = 1_000_000
	}
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	rw, ro := rwAndROMountPoints(t, work)
	startMount(t, storeDir, rw)
	want := sealChain(t, work, rw, params, chainVersions)
	startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"), "--poll", "200ms")
	waitForListing(t, ro, versionDir(ro, chainVersions))

	v1 := filepath.Join(work, "v1")
	mustCLI(t, "export", storeDir, "1", v1)
	sameHashes(t, "export of v1", treeHashes(t, v1), want[1])

	t.Run("listings", func(t *testing.T) {
		var patches, deltas []string
		for v := 1; v <= chainVersions; v++ {
			if v > 1 {
				patches = append(patches, patchName(v))
			}
			deltas = append(deltas, filepath.Base(versionDir(rw, v)))
		}
		for _, mnt := range []string{rw, ro} {
			if got := rootListing(t, filepath.Join(mnt, "patches")); got != strings.Join(patches, " ") {
				t.Errorf("ls %s/patches: %q", mnt, got)
			}
			if got := rootListing(t, filepath.Join(mnt, "deltas")); got != strings.Join(deltas, " ") {
				t.Errorf("ls %s/deltas: %q", mnt, got)
			}
			// The first version has no patch, and is a full checkpoint in deltas/.
			_, err := os.Stat(filepath.Join(mnt, "patches", patchName(1)))
			if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("stat patches/%s: %v, want ENOENT", patchName(1), err)
			}
			sameHashes(t, "deltas/weight_v000001", sha256sumTree(t, filepath.Join(mnt, "deltas", "weight_v000001")), want[1])
		}
	})

	t.Run("weightfs apply of v2-v20 from the read-write mount", func(t *testing.T) {
		applyChain(t, rw, v1, want, func(patch, file, name string) error {
			r := runCLI(t, "apply", patch, file)
			if r.code != 0 {
				return fmt.Errorf("weightfs apply: exit %d: %s", r.code, r.stderr)
			}
			return nil
		})
	})

	t.Run("apply_patch.py of v2-v20 from the read-only mount", func(t *testing.T) {
		applyChain(t, ro, v1, want, startPythonApplier(t).apply)
	})

	t.Run("weightfs patch writes the mount's file", func(t *testing.T) {
		out := t.TempDir()
		for v := 2; v <= chainVersions; v++ {
			p := filepath.Join(out, patchName(v))
			mustCLI(t, "patch", storeDir, fmt.Sprint(v), "-o", p)
			wantSum := mustSHA256(t, p)
			for _, mnt := range []string{rw, ro} {
				if got := mustSHA256(t, filepath.Join(mnt, "patches", patchName(v))); got != wantSum {
					t.Errorf("v%d: %s/patches has sha256 %s, weightfs patch wrote %s", v, mnt, got, wantSum)
				}
			}
		}
		if r := runCLI(t, "patch", storeDir, "1", "-o", filepath.Join(out, "v1")); r.code == 0 || !strings.Contains(r.stderr, "no previous") {
			t.Errorf("weightfs patch of the first version: exit %d, %q; want a failure saying it has no previous version", r.code, r.stderr)
		}
	})

	t.Run("a patch applied to the wrong base is refused", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "v1")
		run(t, "cp", "-r", v1, dir)
		patch3 := filepath.Join(rw, "patches", patchName(3)) // base v2, not v1
		sparse, _ := patchFiles(t, patch3)
		file := filepath.Join(dir, sparse[0])
		before := mustSHA256(t, file)
		r := runCLI(t, "apply", patch3, file)
		if r.code == 0 || !strings.Contains(r.stderr, "neither") {
			t.Errorf("weightfs apply to the wrong base: exit %d, stderr %q", r.code, r.stderr)
		}
		if err := pythonApply(patch3, file, sparse[0]); err == nil {
			t.Error("apply_patch.py to the wrong base succeeded")
		}
		if after := mustSHA256(t, file); after != before {
			t.Errorf("refused applies changed %s: sha256 %s, was %s", sparse[0], after, before)
		}
		sameHashes(t, "v1 after refused applies", treeHashes(t, dir), want[1])

		// The right patch applies, and applying it again changes nothing.
		patch2 := filepath.Join(rw, "patches", patchName(2))
		mustCLI(t, "apply", patch2, file)
		r = mustCLI(t, "apply", patch2, file)
		if got := mustSHA256(t, file); got != want[2][sparse[0]] {
			t.Errorf("after applying v2 twice: sha256 %s, want %s (stdout %q)", got, want[2][sparse[0]], r.stdout)
		}
	})

	t.Run("slime deltas v2-v20 through the read-write mount", func(t *testing.T) {
		replaySlimeChain(t, rw, v1, want, 2, chainVersions)
	})

	t.Run("slime deltas v2-v20 through the read-only mount", func(t *testing.T) {
		replaySlimeChain(t, ro, v1, want, 2, chainVersions)
	})

	verifyStore(t, storeDir)
}

// applyChain copies base (version 1) and applies the patches of versions 2 to 20 from
// MNT/patches in order with apply, checking every file's SHA-256 after each version.
func applyChain(t *testing.T, mnt, base string, want map[int]map[string]string, apply func(patch, file, name string) error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	run(t, "cp", "-r", base, dir)
	for v := 2; v <= chainVersions; v++ {
		patch := filepath.Join(mnt, "patches", patchName(v))
		sparse, whole := patchFiles(t, patch)
		if len(sparse) == 0 {
			t.Fatalf("patch of v%d changes no safetensors file", v)
		}
		for _, name := range sparse {
			if err := apply(patch, filepath.Join(dir, filepath.FromSlash(name)), name); err != nil {
				t.Fatalf("v%d: %s: %v", v, name, err)
			}
		}
		for _, name := range whole {
			copyWholeFile(t, patch, name, filepath.Join(dir, filepath.FromSlash(name)))
		}
		sameHashes(t, fmt.Sprintf("after the patch of v%d", v), treeHashes(t, dir), want[v])
		if t.Failed() {
			return
		}
	}
}

// pythonApply runs the reference Python apply.
func pythonApply(patch, file, name string) error {
	cmd := exec.Command("/usr/bin/python3", filepath.Join(repoRoot(), "examples", "apply_patch.py"), patch, file, "--name", name)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("apply_patch.py: %v: %s", err, out)
	}
	return nil
}

// patchFiles lists the files a patch changes in place and those it carries whole.
func patchFiles(t *testing.T, patch string) (sparse, whole []string) {
	t.Helper()
	p, f := openPatch(t, patch)
	defer f.Close()
	for _, pf := range p.Plan.Files {
		if pf.Whole {
			whole = append(whole, pf.Name)
		} else {
			sparse = append(sparse, pf.Name)
		}
	}
	sort.Strings(sparse)
	return sparse, whole
}

func openPatch(t *testing.T, patch string) (*delta.Patch, *os.File) {
	t.Helper()
	f, err := os.Open(patch)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	p, err := delta.OpenPatch(f, st.Size())
	if err != nil {
		f.Close()
		t.Fatalf("open patch %s: %v", patch, err)
	}
	return p, f
}

// copyWholeFile writes a file the patch carries whole (the Python reference leaves those to
// its caller).
func copyWholeFile(t *testing.T, patch, name, dst string) {
	t.Helper()
	p, f := openPatch(t, patch)
	defer f.Close()
	r, err := p.WholeFile(name)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, r); err != nil {
		t.Fatal(err)
	}
}

func mustSHA256(t *testing.T, p string) string {
	t.Helper()
	sum, err := fileSHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestPatchSizeAtOnePercent: the patch of a version with about 1% changed elements, as the
// mount serves it, is under 8% of the full checkpoint.
func TestPatchSizeAtOnePercent(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	mustCLI(t, "init", storeDir)
	m, err := gen.New(gen.ConfigForParams(4_000_000, 1e-6, 31))
	if err != nil {
		t.Fatal(err)
	}
	var full int64
	for v := 1; v <= 2; v++ {
		if v > 1 {
			m.Step()
		}
		src := srcDir(work, v)
		if err := m.WriteCheckpoint(src); err != nil {
			t.Fatal(err)
		}
		mustCLI(t, "commit", storeDir, src, "--version", fmt.Sprint(v))
		if v == 2 {
			full = treeSize(t, src)
		}
	}
	st, err := store.Open(storeDir, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Version(2)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	frac := info.ChangedFraction()
	if frac < 0.005 || frac > 0.02 {
		t.Fatalf("v2 changed %.3f%% of its elements; the test wants about 1%%", 100*frac)
	}

	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	startMount(t, storeDir, mnt, "--read-only", "--cache-dir", filepath.Join(work, "cache"))
	fi, err := os.Stat(filepath.Join(mnt, "patches", patchName(2)))
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(fi.Size()) / float64(full)
	t.Logf("v2: %.3f%% of elements changed; patch %d bytes, full checkpoint %d bytes: %.2f%%", 100*frac, fi.Size(), full, 100*ratio)
	if ratio >= 0.08 {
		t.Errorf("the patch is %.2f%% of the full checkpoint, want < 8%%", 100*ratio)
	}
	if got, err := fileSHA256(filepath.Join(mnt, "patches", patchName(2))); err != nil || got == "" {
		t.Errorf("read the patch: %v", err)
	}
}

// treeSize is the total size of the regular files under dir.
func treeSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeltaViewsOfDamagedStore damages every object of a store and serves it read-only: the
// patch and the delta of v2 fail with EIO or hold exactly the bytes of an undamaged copy,
// never wrong ones, and the damage is noticed.
func TestDeltaViewsOfDamagedStore(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it reads loose object files (store format 2's layout)
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir, want := smallStore(t, 300_000, 2)
	good := filepath.Join(work, "good")
	run(t, "cp", "-r", storeDir, good)
	wantPatch := filepath.Join(work, "want.safetensors")
	mustCLI(t, "patch", good, "2", "-o", wantPatch)
	wantSum := mustSHA256(t, wantPatch)

	damaged := 0
	for _, p := range objectFiles(t, storeDir) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x40
		os.Chmod(p, 0o644)
		if err := os.WriteFile(p, data, 0o444); err != nil {
			t.Fatal(err)
		}
		damaged++
	}
	if damaged == 0 {
		t.Fatal("no objects to damage")
	}
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	startMount(t, storeDir, mnt, "--read-only", "--cache-dir", filepath.Join(work, "cache"))

	eio := 0
	data, err := os.ReadFile(filepath.Join(mnt, "patches", patchName(2)))
	switch {
	case errors.Is(err, syscall.EIO):
		eio++
	case err != nil:
		t.Errorf("read the patch of v2: %v, want EIO", err)
	default:
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != wantSum {
			t.Errorf("the patch of v2 from a damaged store has wrong bytes")
		}
	}
	deltaDir := filepath.Join(mnt, "deltas", "weight_v000002")
	_, err = os.ReadDir(deltaDir)
	switch {
	case errors.Is(err, syscall.EIO):
		eio++
	case err != nil:
		t.Errorf("list the delta of v2: %v, want EIO", err)
	default:
		// Served after all: it must be the exact delta.
		v1 := filepath.Join(work, "v1")
		mustCLI(t, "export", good, "1", v1)
		r := fullPull(t, v1)
		r.pull(t, deltaDir, 2)
		sameHashes(t, "v1 + the delta of v2 from a damaged store", r.hashes(), safetensorsHashes(toIntKeys(want)[2]))
	}
	if eio == 0 {
		t.Error("every object is damaged, yet the patch and the delta of v2 were served")
	}
}

func toIntKeys(m map[uint64]map[string]string) map[int]map[string]string {
	out := map[int]map[string]string{}
	for k, v := range m {
		out[int(k)] = v
	}
	return out
}

// TestApplyDirRefusalKeepsState (issue 27, item 9): `weightfs apply PATCH DIR` of a patch
// from another version than DIR holds is refused before anything is written and leaves
// DIR's state as it was, so that the right patches apply afterwards. DIR is an export of
// version 1 (no state file); the patch from 2 to 3 is refused; then 1 -> 2 and 2 -> 3 apply.
func TestApplyDirRefusalKeepsState(t *testing.T) {
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	want := genSeries(t, work, 200_000, 43, 3, func(v int, src string) {
		mustCLI(t, "commit", storeDir, src)
	})
	dir := filepath.Join(work, "dir")
	mustCLI(t, "export", storeDir, "1", dir)
	p21, p32 := filepath.Join(work, "p21.safetensors"), filepath.Join(work, "p32.safetensors")
	mustCLI(t, "patch", storeDir, "2", "--from", "1", "-o", p21)
	mustCLI(t, "patch", storeDir, "3", "--from", "2", "-o", p32)
	statePath := filepath.Join(dir, delta.StateDir, delta.StateFile)

	r := runCLI(t, "apply", p32, dir)
	if r.code == 0 || !strings.Contains(r.stderr, "base does not match") {
		t.Fatalf("apply of the patch from 2 to a directory at 1: exit %d, stderr %s; want a base mismatch", r.code, r.stderr)
	}
	if b, err := os.ReadFile(statePath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused apply left the state %q (%v); want none, as before", b, err)
	}
	sameHashes(t, "directory after the refused apply", followedHashes(t, dir), want[1])
	mustCLI(t, "apply", p21, dir)
	sameHashes(t, "directory at 2", followedHashes(t, dir), want[2])
	mustCLI(t, "apply", p32, dir)
	sameHashes(t, "directory at 3", followedHashes(t, dir), want[3])
	// A second refusal, of a directory that records its version, leaves that record.
	before, err := os.ReadFile(statePath)
	if err != nil || !strings.Contains(string(before), `"version":3`) {
		t.Fatalf("the state of the directory at 3: %q, %v; want version 3", before, err)
	}
	if r := runCLI(t, "apply", p21, dir); r.code == 0 || !strings.Contains(r.stderr, "base does not match") {
		t.Errorf("apply of the patch from 1 to a directory at 3: exit %d, stderr %s; want a base mismatch", r.code, r.stderr)
	}
	if after, err := os.ReadFile(statePath); err != nil || string(after) != string(before) {
		t.Errorf("apply of an older patch changed the state from %q to %q (%v)", before, after, err)
	}
	sameHashes(t, "directory after the refused older patch", followedHashes(t, dir), want[3])
}

// TestCommitSkipsStateDir (issue 27, item 13): `weightfs commit STORE DIR` of a directory that
// apply or follow keeps stores its files, not DIR/.weightfs/ (their state and lock); a
// .weightfs below the top is an ordinary directory of the model and is stored.
func TestCommitSkipsStateDir(t *testing.T) {
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	dir := filepath.Join(work, "dir")
	files := map[string]string{
		"config.json":         `{"v": 1}`,
		"sub/.weightfs/x.txt": "part of the model",
	}
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := delta.WriteDirState(dir, delta.DirState{Version: 7}); err != nil {
		t.Fatal(err)
	}
	unlock, err := delta.LockDir(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	mustCLI(t, "commit", storeDir, dir)
	out := filepath.Join(work, "out")
	mustCLI(t, "export", storeDir, "1", out)
	got := treeHashes(t, out)
	want := map[string]string{}
	for name, data := range files {
		want[name] = fmt.Sprintf("%x", sha256.Sum256([]byte(data)))
	}
	sameHashes(t, "the committed version", got, want)
	if _, err := os.Stat(filepath.Join(out, delta.StateDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the version holds %s: %v", delta.StateDir, err)
	}
}
