package fs

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/weightfs/weightfs/store"
)

// TestPatchRenderedAhead: a read-only mount renders nothing ahead until something looks in
// patches/; from then on the patch of each new version is rendered as soon as the version is
// seen, once, and the follower's name for it (weight_vN.from_vK, K the version before) and the
// one-step name serve that render with the bytes WritePatch writes, rendering nothing again.
func TestPatchRenderedAhead(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	if err := store.Init(root); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(root, store.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := pattern(1, 8192)
	commit := func(v uint64) {
		t.Helper()
		w[int(v)*37%len(w)] ^= 1
		w[int(v)*101%len(w)] ^= 0x40
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "model.safetensors"), viewSafetensors(t, viewTensor{"w", []int64{4096}, w}))
		if _, err := st.Commit(dir, store.CommitOptions{Version: v}); err != nil {
			t.Fatalf("commit %d: %v", v, err)
		}
	}
	commit(1)
	commit(2)
	ro, err := store.Open(root, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	mnt, srv := mountTest(t, FromStore(ro), Options{ReadOnly: true})
	waitLatest := func(v uint64) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
			if target, err := os.Readlink(filepath.Join(mnt, "latest")); err == nil && target == VersionName(v) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the mount's latest is not %s", VersionName(v))
			}
		}
	}

	// The poller, not a lookup, must have noticed version 3 before patches/ is looked up:
	// latest may show a version between the poller's refresh and its notice, and a lookup
	// in that window would (rightly) have version 3's patch rendered ahead.
	waitSeen := func(v uint64) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
			srv.m.mu.Lock()
			_, seen := slices.BinarySearch(srv.m.seen, v)
			srv.m.mu.Unlock()
			if seen {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the poller has not noticed %s", VersionName(v))
			}
		}
	}

	commit(3)
	waitLatest(3)
	waitSeen(3)
	if n := srv.Stats().PatchesAhead; n != 0 {
		t.Fatalf("%d patches rendered ahead before anyone read patches/, want 0", n)
	}
	// A lookup (the size comes from the manifests) says that patches are read here; it
	// renders nothing itself.
	if _, err := os.Stat(filepath.Join(mnt, "patches", PatchName(3))); err != nil {
		t.Fatal(err)
	}
	if m := ro.Stats().RenderMisses; m != 0 {
		t.Fatalf("a lookup rendered %d patches, want 0", m)
	}

	commit(4)
	for deadline := time.Now().Add(2 * time.Minute); srv.Stats().PatchesAhead < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the patch of version 4 was not rendered ahead")
		}
	}
	if n, m := srv.Stats().PatchesAhead, ro.Stats().RenderMisses; n != 1 || m != 1 {
		t.Fatalf("after version 4: %d patches rendered ahead, %d renders; want 1 and 1", n, m)
	}
	var want bytes.Buffer
	if _, err := st.WritePatch(4, &bufferAt{&want}); err != nil {
		t.Fatal(err)
	}
	sameFileBytes(t, filepath.Join(mnt, "patches", CatchupPatchName(4, 3)), want.Bytes())
	sameFileBytes(t, filepath.Join(mnt, "patches", PatchName(4)), want.Bytes())
	if m := ro.Stats().RenderMisses; m != 1 {
		t.Fatalf("serving the patch rendered ahead took %d renders in all, want 1", m)
	}
	// A catch-up patch from further back is still rendered when asked for.
	want.Reset()
	if _, err := st.WritePatchFrom(4, 2, &bufferAt{&want}); err != nil {
		t.Fatal(err)
	}
	sameFileBytes(t, filepath.Join(mnt, "patches", CatchupPatchName(4, 2)), want.Bytes())
	if m := ro.Stats().RenderMisses; m != 2 {
		t.Fatalf("after a catch-up patch from version 2: %d renders, want 2", m)
	}
}
