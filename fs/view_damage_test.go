package fs

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/store"
)

// TestDamagedRenderIsNeverServed damages a cached render (a patch, a catch-up patch, a
// delta's index or its shard: one byte flipped, the file removed, or cut short) before a mount serves it, or
// between its open and its read, and reads it through the mount: the bytes are always the
// render's own. The damage is found by the render's sums (a flip) or its listing (a missing
// or short file), logged, the render dropped and made again from the store; never a wrong
// byte, and never EEXIST from a re-render colliding with the damaged one.
func TestDamagedRenderIsNeverServed(t *testing.T) {
	targets := []string{"patch", "catchup", "index", "shard"}
	damages := []string{"flip", "remove", "truncate"}
	for _, target := range targets {
		for _, damage := range damages {
			for _, when := range []string{"before-mount", "after-open"} {
				if when == "after-open" && damage == "remove" {
					continue // an open file outlives its name
				}
				t.Run(target+"/"+damage+"/"+when, func(t *testing.T) {
					damagedRender(t, target, damage, when)
				})
			}
		}
	}
}

func damagedRender(t *testing.T, target, damage, when string) {
	st := viewStore(t)
	var cachePath, mountRel string
	switch target {
	case "patch":
		rf, err := st.RenderPatch(2)
		if err != nil {
			t.Fatal(err)
		}
		cachePath, mountRel = rf.Path, filepath.Join("patches", PatchName(2))
	case "catchup":
		rf, err := st.RenderPatchFrom(5, 1)
		if err != nil {
			t.Fatal(err)
		}
		cachePath, mountRel = rf.Path, filepath.Join("patches", CatchupPatchName(5, 1))
	default:
		_, files, err := st.RenderSlime(2)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if (target == "index") == (f.Name == delta.SlimeIndexName) {
				cachePath, mountRel = f.Path, filepath.Join("deltas", VersionName(2), f.Name)
			}
		}
	}
	want := readHostFile(t, cachePath)
	harm := func() {
		t.Helper()
		os.Chmod(cachePath, 0o644)
		switch damage {
		case "flip":
			f, err := os.OpenFile(cachePath, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			pos := int64(len(want) - 2) // past any header a render's check reads
			if _, err := f.WriteAt([]byte{want[pos] ^ 0x20}, pos); err != nil {
				t.Fatal(err)
			}
			f.Close()
		case "remove":
			if err := os.Remove(cachePath); err != nil {
				t.Fatal(err)
			}
		case "truncate":
			if err := os.Truncate(cachePath, int64(len(want)/2)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if when == "before-mount" {
		harm()
	}
	mnt, _ := mountTest(t, FromStore(st), Options{})
	p := filepath.Join(mnt, mountRel)
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("open %s: %v", mountRel, err)
	}
	defer f.Close()
	if when == "after-open" {
		harm()
	}
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("read %s: %v", mountRel, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s served %d bytes that differ from the render's %d", mountRel, len(got), len(want))
	}
	if again := readHostFile(t, cachePath); !bytes.Equal(again, want) {
		t.Errorf("the cache holds a damaged render of %s still", mountRel)
	}
	_ = store.ErrCorrupt
}
