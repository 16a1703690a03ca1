package store

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// refreshFixture is a writer that sealed version 1 (two safetensors files and a blob) and a
// read-only store that keeps a copy, opened at version 1; version 2 changes 1% of the elements
// of every tensor, so the reader's copy is brought forward by patches in place.
type refreshFixture struct {
	w, r     *Store
	versions [3]map[string][]byte // by version number (index 0 unused)
	log      *logLines
}

func newRefreshFixture(t *testing.T) *refreshFixture {
	t.Helper()
	rng := rand.New(rand.NewPCG(41, 42))
	fx := &refreshFixture{log: &logLines{}}
	a, b := bf16Like(rng, 96<<10), bf16Like(rng, 40<<10)
	file := func(a, b []byte) []byte {
		return safetensorsFile(t, testTensor{"a", "BF16", []int64{int64(len(a) / 2)}, a}, testTensor{"b", "BF16", []int64{int64(len(b) / 2)}, b})
	}
	fx.versions[1] = map[string][]byte{"model-1.safetensors": file(a, b), "model-2.safetensors": file(b, a), "config.json": []byte(`{"v": 1}`)}
	a2, b2 := perturb(rng, a, 2, 0.01), perturb(rng, b, 2, 0.01)
	fx.versions[2] = map[string][]byte{"model-1.safetensors": file(a2, b2), "model-2.safetensors": file(b2, a2), "config.json": []byte(`{"v": 2}`)}
	var root string
	fx.w, root = newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	commitTree(t, fx.w, 1, fx.versions[1])
	fx.r = openStore(t, root, Options{ReadOnly: true, Materialize: true, CacheDir: t.TempDir(), Logger: logtest.New(fx.log.logf)})
	if v := fx.r.mat.view(); v == nil || v.ver.m.Version != 1 {
		t.Fatalf("the reader's copy does not hold version 1 after Open")
	} else {
		v.release()
	}
	commitTree(t, fx.w, 2, fx.versions[2])
	return fx
}

// check reads every file of version v through r and compares it with what was committed.
func (fx *refreshFixture) check(t *testing.T, what string, v uint64) {
	t.Helper()
	for p, want := range fx.versions[v] {
		mustEqualBytes(t, what+": "+p, readWhole(t, fx.r, v, p), want)
	}
}

// latestInCopy fails the test unless v is r's latest version and its copy holds v.
func (fx *refreshFixture) latestInCopy(t *testing.T, what string, v uint64) {
	t.Helper()
	if got, _ := fx.r.Latest(); got != v {
		t.Fatalf("%s: latest is %d, want %d", what, got, v)
	}
	view := fx.r.mat.view()
	if view == nil {
		t.Fatalf("%s: no copy is served, want one at version %d", what, v)
	}
	defer view.release()
	if view.ver.m.Version != v {
		t.Fatalf("%s: the copy holds version %d, want %d", what, view.ver.m.Version, v)
	}
}

// TestReaderShowsVersionOnceCopyHoldsIt: while a read-only store brings its copy forward to a
// version another process sealed, that version is not listed, not the latest, and cannot be
// opened, and the previous one reads exactly; after Refresh it is the latest, the copy holds
// it, and it reads exactly.
func TestReaderShowsVersionOnceCopyHoldsIt(t *testing.T) {
	fx := newRefreshFixture(t)
	r := fx.r
	during := 0
	r.hook = func(point string) error {
		if point != "materialize-partial" {
			return nil
		}
		during++
		if v, _ := r.Latest(); v != 1 {
			t.Errorf("during the bring-forward: latest is %d, want 1", v)
		}
		if vs := r.Versions(); len(vs) != 1 || vs[0].Number != 1 {
			t.Errorf("during the bring-forward: versions %v, want only 1", vs)
		}
		if _, err := r.OpenFile(2, "config.json"); !errors.Is(err, ErrNoSuchVersion) {
			t.Errorf("during the bring-forward: open of version 2: %v, want ErrNoSuchVersion", err)
		}
		fx.check(t, "version 1 during the bring-forward", 1)
		return nil
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	r.hook = nil
	if during == 0 {
		t.Fatal("the copy was not brought forward by patches in place (the hook never ran)")
	}
	fx.latestInCopy(t, "after Refresh", 2)
	fx.check(t, "version 2 after Refresh", 2)
	fx.check(t, "version 1 after Refresh", 1)
}

// TestReaderDamagedCopyDuringForward damages the reader's copy while it is brought forward
// (a byte the patches do not touch): the damage is found before the new version is shown,
// logged, the copy rebuilt from the objects, and every byte of both versions reads exactly.
func TestReaderDamagedCopyDuringForward(t *testing.T) {
	fx := newRefreshFixture(t)
	r := fx.r
	damaged := false
	r.hook = func(point string) error {
		if point != "materialize-partial" || damaged {
			return nil
		}
		damaged = true
		p := filepath.Join(r.mat.dir, "model-2.safetensors")
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		info, _ := f.Stat()
		b := make([]byte, 1)
		off := info.Size() - 1
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x5a
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	r.hook = nil
	if !damaged {
		t.Fatal("the copy was not brought forward by patches in place (the hook never ran)")
	}
	if !fx.log.has("not brought forward; rebuilding") {
		t.Errorf("the damaged copy was not logged; log:\n%s", fx.log.String())
	}
	fx.latestInCopy(t, "after Refresh and the rebuild", 2)
	fx.check(t, "version 2 after the rebuild", 2)
	fx.check(t, "version 1 after the rebuild", 1)
}

// TestReaderForwardStopsMidway: an update of the reader's copy that stops between two patches
// (an injected crash) ends the check beside the patches too (Refresh returns), serves the new
// version from the objects, exactly, and the next Refresh rebuilds the copy at it.
func TestReaderForwardStopsMidway(t *testing.T) {
	fx := newRefreshFixture(t)
	r := fx.r
	r.hook = func(point string) error {
		if point == "materialize-partial" {
			return errInjected
		}
		return nil
	}
	if err := r.Refresh(); !errors.Is(err, errInjected) {
		t.Fatalf("Refresh with the update stopped midway: %v, want the injected error", err)
	}
	r.hook = nil
	if v := r.mat.view(); v != nil {
		v.release()
		t.Fatalf("the copy is served after an update that stopped midway")
	}
	fx.check(t, "version 2 with no copy", 2)
	fx.check(t, "version 1 with no copy", 1)
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	fx.latestInCopy(t, "after the next Refresh", 2)
	fx.check(t, "version 2 after the rebuild", 2)
}

// TestCatchUpWritesNoMetas: bringing a read-only store's copy forward plans each in-place
// patch from the changed record's header alone; asking objectStore.meta instead walked down
// to the base and put every meta found into the node-local index, per changed tensor (the
// most of a many-tensor catch-up). The patched copy reads exactly.
func TestCatchUpWritesNoMetas(t *testing.T) {
	fx := newRefreshFixture(t)
	if err := fx.r.Refresh(); err != nil {
		t.Fatal(err)
	}
	fx.latestInCopy(t, "after Refresh", 2)
	fx.check(t, "after Refresh", 2)
	n := 0
	for _, f := range manifestOf(t, fx.r, 2).Files {
		for _, tn := range f.Tensors {
			n++
			fx.r.objects.metaMu.Lock()
			_, held := fx.r.objects.metas[tn.ID]
			fx.r.objects.metaMu.Unlock()
			if _, indexed := fx.r.ix.object(tn.ID); held || indexed {
				t.Errorf("%s %s: the catch-up recorded the meta of object %s (held %v, in the index %v)", f.Path, tn.Name, tn.ID, held, indexed)
			}
		}
	}
	if n != 4 {
		t.Fatalf("version 2 has %d tensors, want 4", n)
	}
}
