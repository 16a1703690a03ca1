package fs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/store"
)

// viewTensor is a tensor of a handmade safetensors file.
type viewTensor struct {
	name  string
	shape []int64
	data  []byte // bf16
}

func viewSafetensors(t *testing.T, tensors ...viewTensor) []byte {
	t.Helper()
	hdr := make([]delta.Tensor, len(tensors))
	for i, tt := range tensors {
		hdr[i] = delta.Tensor{Name: tt.name, DType: delta.DTypeBF16, Shape: tt.shape}
	}
	out, err := delta.EncodeHeader(nil, hdr)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tensors {
		out = append(out, tt.data...)
	}
	return out
}

// newEmptyStore opens a new, empty store as its writer, with a cache directory of its own,
// closed when the test ends.
func newEmptyStore(t *testing.T) *store.Store {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	if err := store.Init(root); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(root, store.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// viewStore commits a small history to a new store: v1; v2 and v5 change a few elements; v7
// reshapes a tensor. It returns the open writer store.
func viewStore(t *testing.T) *store.Store {
	t.Helper()
	st := newEmptyStore(t)
	w := pattern(1, 4096)
	n := pattern(2, 64)
	for _, v := range []uint64{1, 2, 5, 7} {
		shape := []int64{32}
		switch v {
		case 2:
			w[100] ^= 1
			w[3001] ^= 0x80
		case 5:
			w[7] ^= 2
			n[0] ^= 4
		case 7:
			shape = []int64{2, 16}
			w[9] ^= 1
		}
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "config.json"), []byte(`{"model": "test"}`))
		writeFile(t, filepath.Join(dir, "sub", "notes.txt"), []byte("not served in deltas/"))
		writeFile(t, filepath.Join(dir, "model.safetensors"), viewSafetensors(t,
			viewTensor{"w", []int64{2048}, w}, viewTensor{"norm", shape, n}))
		if _, err := st.Commit(dir, store.CommitOptions{Version: v}); err != nil {
			t.Fatalf("commit %d: %v", v, err)
		}
	}
	return st
}

// TestViewsServeRenders mounts a store read-write and checks patches/ and deltas/: what is
// listed, what resolves, and that every file holds exactly the store's render, at any offset.
func TestViewsServeRenders(t *testing.T) {
	st := viewStore(t)
	mnt, _ := mountTest(t, FromStore(st), Options{})

	if got := listDir(t, filepath.Join(mnt, "patches")); got != "weight_v000002.safetensors weight_v000005.safetensors" {
		t.Errorf("ls patches: %q", got)
	}
	if got := listDir(t, filepath.Join(mnt, "deltas")); got != "weight_v000001 weight_v000002 weight_v000005 weight_v000007" {
		t.Errorf("ls deltas: %q", got)
	}
	for _, name := range []string{"weight_v000001.safetensors", "weight_v000003.safetensors", "weight_v000007.safetensors", "weight_v2.safetensors", "weight_v000002"} {
		_, err := os.Stat(filepath.Join(mnt, "patches", name))
		wantErrno(t, "stat patches/"+name, err, syscall.ENOENT)
	}

	for _, v := range []uint64{2, 5} {
		var want bytes.Buffer
		if _, err := st.WritePatch(v, &bufferAt{&want}); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(mnt, "patches", PatchName(v))
		sameFileBytes(t, p, want.Bytes())
	}

	// deltas/: v1 is the full checkpoint (top-level files only), v2 and v5 are deltas, 3, 4
	// and 6 are empty deltas that resolve without being listed, v7 is full (reshaped).
	for _, v := range []uint64{1, 7} {
		dir := filepath.Join(mnt, "deltas", VersionName(v))
		if got := listDir(t, dir); got != "config.json model.safetensors" {
			t.Errorf("ls deltas/%s: %q", VersionName(v), got)
		}
		for _, name := range []string{"config.json", "model.safetensors"} {
			sameFileBytes(t, filepath.Join(dir, name), readVersionFile(t, st, v, name))
		}
		_, err := os.Stat(filepath.Join(dir, "sub"))
		wantErrno(t, "stat a subdirectory in a full delta", err, syscall.ENOENT)
	}
	for _, v := range []uint64{2, 5} {
		plan, files, err := st.RenderSlime(v)
		if err != nil || plan.Kind != store.SlimeDelta {
			t.Fatalf("RenderSlime(%d) = %+v, %v", v, plan, err)
		}
		dir := filepath.Join(mnt, "deltas", VersionName(v))
		var names []string
		for _, f := range files {
			names = append(names, f.Name)
			sameFileBytes(t, filepath.Join(dir, f.Name), readHostFile(t, f.Path))
		}
		sort.Strings(names)
		if got := listDir(t, dir); got != strings.Join(names, " ") {
			t.Errorf("ls deltas/%s: %q, want %q", VersionName(v), got, strings.Join(names, " "))
		}
	}
	for _, v := range []uint64{3, 4, 6} {
		dir := filepath.Join(mnt, "deltas", VersionName(v))
		if got := listDir(t, dir); got != delta.SlimeIndexName {
			t.Errorf("ls deltas/%s: %q", VersionName(v), got)
		}
		want, _ := delta.EncodeSlimeIndex(v, nil)
		sameFileBytes(t, filepath.Join(dir, delta.SlimeIndexName), want)
	}
	for _, name := range []string{"weight_v000008", "weight_v000000", "weight_v3", "latest"} {
		_, err := os.Stat(filepath.Join(mnt, "deltas", name))
		wantErrno(t, "stat deltas/"+name, err, syscall.ENOENT)
	}

	// Nothing under a view can be changed.
	patch := filepath.Join(mnt, "patches", PatchName(2))
	_, err := os.OpenFile(patch, os.O_WRONLY, 0)
	wantErrno(t, "open a patch for writing", err, syscall.EPERM)
	wantErrno(t, "unlink a patch", os.Remove(patch), syscall.EPERM)
	wantErrno(t, "create in patches/", os.WriteFile(filepath.Join(mnt, "patches", "x"), nil, 0o644), syscall.EPERM)
	wantErrno(t, "chmod a patch", os.Chmod(patch, 0o600), syscall.EPERM)
	d2 := filepath.Join(mnt, "deltas", VersionName(2))
	wantErrno(t, "mkdir in a delta", os.Mkdir(filepath.Join(d2, "x"), 0o755), syscall.EPERM)
	wantErrno(t, "unlink the index", os.Remove(filepath.Join(d2, delta.SlimeIndexName)), syscall.EPERM)
	wantErrno(t, "rmdir a delta", os.Remove(d2), syscall.EPERM)
	wantErrno(t, "truncate a full delta's file", os.Truncate(filepath.Join(mnt, "deltas", VersionName(1), "config.json"), 0), syscall.EPERM)
}

// TestViewsReadOnlyMount serves the views from a read-only store: it renders into its own
// cache directory, and every change is EROFS.
func TestViewsReadOnlyMount(t *testing.T) {
	st := viewStore(t)
	root := st.Root()
	st.Close()
	cache := t.TempDir()
	ro, err := store.Open(root, store.Options{ReadOnly: true, CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	mnt, _ := mountTest(t, FromStore(ro), Options{ReadOnly: true})
	var want bytes.Buffer
	if _, err := ro.WritePatch(5, &bufferAt{&want}); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mnt, "patches", PatchName(5))
	sameFileBytes(t, p, want.Bytes())
	if ents, err := filepath.Glob(filepath.Join(cache, "render", "patches", "*.safetensors")); err != nil || len(ents) != 1 {
		t.Errorf("the reader's cache holds %d patches (%v), want 1", len(ents), err)
	}
	if got := listDir(t, filepath.Join(mnt, "deltas", VersionName(5))); got != "model-00000-of-00001.safetensors "+delta.SlimeIndexName {
		t.Errorf("ls deltas/weight_v000005: %q", got)
	}
	wantErrno(t, "unlink a patch", os.Remove(p), syscall.EROFS)
	_, err = os.OpenFile(p, os.O_RDWR, 0)
	wantErrno(t, "open a patch read-write", err, syscall.EROFS)
}

// failingRenders is a store whose renders fail as a damaged store's do.
type failingRenders struct{ storeVersions }

func (failingRenders) RenderPatch(v uint64) (store.RenderedFile, error) {
	return store.RenderedFile{}, fmt.Errorf("object 1234: %w", store.ErrCorrupt)
}

func (f failingRenders) RenderSlime(v uint64) (store.SlimePlan, []store.RenderedFile, error) {
	plan, _ := f.PlanSlime(v)
	return plan, nil, fmt.Errorf("object 1234: %w", store.ErrCorrupt)
}

// TestViewRenderFailureIsEIO: a render that fails is EIO, and nothing is served.
func TestViewRenderFailureIsEIO(t *testing.T) {
	st := viewStore(t)
	mnt, _ := mountTest(t, failingRenders{storeVersions{st}}, Options{})
	_, err := os.ReadFile(filepath.Join(mnt, "patches", PatchName(2)))
	wantErrno(t, "read a patch that fails to render", err, syscall.EIO)
	_, err = os.ReadDir(filepath.Join(mnt, "deltas", VersionName(2)))
	wantErrno(t, "list a delta that fails to render", err, syscall.EIO)
	// A full checkpoint needs no render.
	sameFileBytes(t, filepath.Join(mnt, "deltas", VersionName(1), "config.json"), readVersionFile(t, st, 1, "config.json"))
}

// TestViewsOfFakeStoreAreEmpty: a version store that cannot render gets empty views.
func TestViewsOfFakeStoreAreEmpty(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	for _, view := range []string{"patches", "deltas"} {
		if got := listDir(t, filepath.Join(mnt, view)); got != "" {
			t.Errorf("ls %s: %q", view, got)
		}
	}
}

// sameFileBytes reads p whole and at scattered offsets and compares with want.
func sameFileBytes(t *testing.T, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d wanted", p, len(got), len(want))
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range []int{len(want) - 1, len(want) / 3, 0, 8, len(want) / 2} {
		if off < 0 {
			continue
		}
		buf := make([]byte, 100)
		n, _ := f.ReadAt(buf, int64(off))
		if wantN := min(100, len(want)-off); n != wantN || !bytes.Equal(buf[:n], want[off:off+n]) {
			t.Fatalf("%s at %d: %d bytes, want %d", p, off, n, wantN)
		}
	}
	if n, err := f.ReadAt(make([]byte, 10), int64(len(want))); n != 0 || err == nil {
		t.Errorf("%s: read at the end gave %d bytes, %v", p, n, err)
	}
}

func readVersionFile(t *testing.T, st *store.Store, v uint64, name string) []byte {
	t.Helper()
	f, err := st.OpenFile(v, name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if n, err := f.ReadAt(b, 0); n != len(b) {
		t.Fatalf("read %s of version %d: %d of %d bytes: %v", name, v, n, len(b), err)
	}
	return b
}

func readHostFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bufferAt is an io.WriterAt over a bytes.Buffer.
type bufferAt struct{ b *bytes.Buffer }

func (w *bufferAt) WriteAt(p []byte, off int64) (int, error) {
	for int64(w.b.Len()) < off+int64(len(p)) {
		w.b.WriteByte(0)
	}
	copy(w.b.Bytes()[off:], p)
	return len(p), nil
}

// mountPatch2 mounts viewStore's store and returns the path of version 2's patch under the
// mount and the bytes WritePatch gives for it.
func mountPatch2(t *testing.T) (st *store.Store, mnt, patch string, want *bytes.Buffer) {
	t.Helper()
	st = viewStore(t)
	mnt, _ = mountTest(t, FromStore(st), Options{})
	want = new(bytes.Buffer)
	if _, err := st.WritePatch(2, &bufferAt{want}); err != nil {
		t.Fatal(err)
	}
	return st, mnt, filepath.Join(mnt, "patches", PatchName(2)), want
}

// TestViewFileRendersAgain: a cached render removed behind the mount's back (by hand, or
// pruned) is rendered again at the next open, to the same bytes.
func TestViewFileRendersAgain(t *testing.T) {
	st, mnt, p, want := mountPatch2(t)
	sameFileBytes(t, p, want.Bytes())
	delta2 := filepath.Join(mnt, "deltas", VersionName(2), delta.SlimeIndexName)
	index := readHostFile(t, delta2)
	if err := os.RemoveAll(filepath.Join(st.CacheDir(), "render")); err != nil {
		t.Fatal(err)
	}
	sameFileBytes(t, p, want.Bytes())
	sameFileBytes(t, delta2, index)
}

// FuzzParsePatchName: a name in patches/ resolves only if it is exactly PatchName of its
// number.
func FuzzParsePatchName(f *testing.F) {
	for _, s := range []string{"weight_v000002.safetensors", "weight_v2.safetensors", "weight_v000000.safetensors",
		"weight_v1234567.safetensors", "weight_v000002", "x.safetensors", "weight_v00000a.safetensors", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		v, ok := parsePatchName(name)
		if ok && (v == 0 || PatchName(v) != name) {
			t.Fatalf("parsePatchName(%q) = %d, but PatchName(%d) = %q", name, v, v, PatchName(v))
		}
		if !ok && v != 0 {
			t.Fatalf("parsePatchName(%q) = %d, false", name, v)
		}
	})
}

// TestPatchListedWithoutRender: ls -l of patches/ gives every patch's size, worked out from the
// manifests, without rendering one; the first open renders exactly that many bytes.
func TestPatchListedWithoutRender(t *testing.T) {
	st, _, p, want := mountPatch2(t)
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() != int64(want.Len()) {
		t.Fatalf("stat %s: %d bytes, the patch has %d", p, info.Size(), want.Len())
	}
	rendered := filepath.Join(st.CacheDir(), "render", "patches")
	if ents, _ := os.ReadDir(rendered); len(ents) != 0 {
		t.Fatalf("a stat rendered %d patches", len(ents))
	}
	sameFileBytes(t, p, want.Bytes())
	if ents, err := filepath.Glob(filepath.Join(rendered, "*.safetensors")); err != nil || len(ents) != 1 {
		t.Fatalf("after a read the cache holds %d patches (%v), want 1", len(ents), err)
	}
	if info, err := os.Stat(p); err != nil || info.Size() != int64(want.Len()) {
		t.Fatalf("stat after the read: %v, %v", info, err)
	}
}
