package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/weightfs/weightfs/delta"
)

// Rendering: the derived files the mount serves under patches/ and deltas/ (docs/format.md Part III §5) are
// made from the store on demand and kept in this process's cache directory:
//
//	CACHE/render/patches/vNNNNNN-KEY.safetensors   the patch of version NNNNNN
//	CACHE/render/patches/vNNNNNN-KEY.sums.json     its sums (render_sums.go)
//	CACHE/render/deltas/vNNNNNN-KEY/               its slime delta (index, shards, render.json)
//	CACHE/render/tmp/PID-*/                         renders in progress
//
// A render is written under tmp/, fsynced and renamed into place, so a cached name always
// holds a complete render: every read of it returns the same bytes, also after a restart.
// KEY is a digest of everything the bytes depend on (the rendering format, both version
// numbers, the path, kind and SHA-256 of every file of both versions), so a render is reused
// only for the same inputs: when gc drops a version's predecessor, or a cache directory is
// reused with another store, the key differs and the file is rendered again. A read-only
// store renders into its own cache directory and never writes into the store.
//
// Renders are not locked against each other: two renders of one key produce the same bytes,
// the second rename of a file replaces it with equal bytes, and the second rename of a
// directory fails and the first one's result is used. Callers that want to render each key
// once (the mount) serialise per version themselves.

// renderFormat names the layout of rendered files; changing how their bytes are made means a
// new name here, so stale caches are not served. 2: patches record xxh3-128 beside SHA-256.
// 3: each changed tensor's params entry records the xxh3-128 of its new bytes (PatchSize
// counts it, so a render cached by format 2 would be served at the wrong size). 4: each changed
// tensor's params entry records its shape, and a header-only change carries the new header
// (header_files) rather than the whole file. 5: every render's files have sums
// (render_sums.go), which format 4 did not write.
const renderFormat = "weightfs-render-5"

// RenderedFile is one derived file: its bytes are on disk at Path, or (small files that are
// cheaper to make than to cache) in Data. Size is their length either way.
type RenderedFile struct {
	Name string // the file's name in its directory ("" for a patch: the caller names it)
	Path string
	Data []byte
	Size int64
	// check is what the bytes at Path are checked against on every read (ReadAt).
	check *renderCheck
}

// renders is the render cache: it makes the patches, catch-up patches and slime deltas of
// versions into CACHE/render, reuses them while their inputs are the same, prunes them, and
// checks every byte read from them (render_sums.go). What it reads of versions and objects it
// asks the Store for (st: calls of methods only).
type renders struct {
	st    *Store
	log   *slog.Logger
	stats *storeStats
	bufs  *recycler // its renderReads: the chunks under reads of a render (render_sums.go)
	// fileXXH3 holds files' xxh3-128 by their SHA-256, from patch renders (render_fast.go).
	fileXXH3 *lru[ID, [16]byte]
	// referencePatch makes one-step patches take the reference path (tests: render_fast.go).
	referencePatch bool
}

func newRenders(s *Store) *renders {
	return &renders{st: s, log: s.log, stats: &s.stats, bufs: s.objects.buffers(), fileXXH3: newLRU[ID, [16]byte](1 << 20)}
}

// CacheDir is this process's cache directory (index, materialized copy, renders).
func (s *Store) CacheDir() string { return s.cache.dir }

func (r *renders) renderDir(parts ...string) string {
	return filepath.Join(append([]string{r.st.CacheDir(), "render"}, parts...)...)
}

// renderKey is the digest naming a render of cur (against base, which may be nil).
func renderKey(kind string, cur, base *version) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", renderFormat, kind)
	for _, ver := range []*version{cur, base} {
		if ver == nil {
			fmt.Fprintf(h, "none\n")
			continue
		}
		fmt.Fprintf(h, "version %d files %d\n", ver.m.Version, len(ver.m.Files))
		for i := range ver.m.Files {
			f := &ver.m.Files[i]
			fmt.Fprintf(h, "%q %s %d %s\n", f.Path, f.Kind, f.Size, f.SHA256)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:10])
}

// renderName is the cache name of the render of version v with key.
func renderName(v uint64, key string) string { return fmt.Sprintf("v%06d-%s", v, key) }

// renderTemp makes a fresh directory for one render under tmp/, first removing what dead
// processes left there.
func (r *renders) renderTemp() (string, error) {
	base := r.renderDir("tmp")
	if err := r.st.cacheMkdirAll(base); err != nil {
		return "", fmt.Errorf("create render directory: %w", err)
	}
	removeDeadRenders(base)
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%d-", os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("create render directory: %w", err)
	}
	return dir, nil
}

// removeDeadRenders removes the temporary directories of processes that died mid-render.
func removeDeadRenders(base string) {
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		pidStr, _, _ := strings.Cut(e.Name(), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// renderKeepVersions bounds the versions whose renders the cache keeps per kind: engines
// pull recent versions; an older one is rendered again if it is asked for.
const renderKeepVersions = 64

// pruneRenders removes, from directory kind ("patches" or "deltas"), the renders of version v
// under any other key, the renders of versions that are no longer sealed or have lost their
// predecessor (gc), and the renders of all but the newest renderKeepVersions versions.
func (r *renders) pruneRenders(kind string, v uint64, keep string) {
	dir := r.renderDir(kind)
	ents, _ := os.ReadDir(dir)
	type entry struct {
		name string
		v    uint64
	}
	var live []entry
	var numbers []uint64
	remove := func(name string) {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			r.log.Warn("remove stale render", "render", name, "err", err)
		}
	}
	for _, e := range ents {
		base := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".safetensors"), patchSumsSuffix)
		num, _, ok := strings.Cut(strings.TrimPrefix(base, "v"), "-")
		n, err := strconv.ParseUint(num, 10, 64)
		if !ok || err != nil || !strings.HasPrefix(base, "v") {
			continue
		}
		_, hasPrevious := r.st.Previous(n)
		if (n == v && base != keep) || !hasPrevious {
			remove(e.Name())
			continue
		}
		live = append(live, entry{e.Name(), n})
		numbers = append(numbers, n)
	}
	slices.Sort(numbers)
	numbers = slices.Compact(numbers)
	if len(numbers) <= renderKeepVersions {
		return
	}
	oldestKept := numbers[len(numbers)-renderKeepVersions]
	for _, e := range live {
		if e.v < oldestKept && e.v != v { // never the render just asked for
			remove(e.name)
		}
	}
}

// PatchBase returns the version the patch of v is taken against: the sealed version before
// v, when both have the same tensor layout (the same safetensors files holding tensors of the
// same names, dtypes and shapes). Without one there is no patch: the error wraps
// ErrNoPrevious (v is the first version, or the oldest gc kept) or ErrLayoutChanged.
func (s *Store) PatchBase(v uint64) (uint64, error) {
	_, base, err := s.renders.patchVersions(v)
	if err != nil {
		return 0, err
	}
	return base.m.Version, nil
}

func (r *renders) patchVersions(v uint64) (cur, base *version, err error) {
	if cur, err = r.st.versions.sealedVersion(v); err != nil {
		return nil, nil, err
	}
	prev, ok := r.st.Previous(v)
	if !ok {
		return nil, nil, fmt.Errorf("patch of version %d: %w", v, ErrNoPrevious)
	}
	if base, err = r.st.versions.sealedVersion(prev); err != nil {
		return nil, nil, err
	}
	if why := tensorLayoutChange(base, cur); why != "" {
		return nil, nil, fmt.Errorf("patch of version %d: %w since version %d: %s", v, ErrLayoutChanged, prev, why)
	}
	return cur, base, nil
}

// tensorLayoutChange says how the tensor layout of cur differs from base's ("" when it does
// not): which safetensors file or tensor was added, removed, retyped or reshaped.
func tensorLayoutChange(base, cur *version) string {
	for i := range cur.m.Files {
		f := &cur.m.Files[i]
		if f.Kind != kindSafetensors {
			continue
		}
		bf := base.files[f.Path]
		if bf == nil || bf.Kind != kindSafetensors {
			return fmt.Sprintf("safetensors file %s is new", f.Path)
		}
		byName := make(map[string]*manifestTensor, len(bf.Tensors))
		for j := range bf.Tensors {
			byName[bf.Tensors[j].Name] = &bf.Tensors[j]
		}
		for j := range f.Tensors {
			t := &f.Tensors[j]
			bt := byName[t.Name]
			switch {
			case bt == nil:
				return fmt.Sprintf("tensor %s of %s is new", t.Name, f.Path)
			case bt.DType != t.DType || !sameShape(bt.Shape, t.Shape):
				return fmt.Sprintf("tensor %s of %s changed from %s %v to %s %v", t.Name, f.Path, bt.DType, bt.Shape, t.DType, t.Shape)
			}
		}
		if len(bf.Tensors) != len(f.Tensors) {
			return fmt.Sprintf("%s lost tensors (%d before, %d now)", f.Path, len(bf.Tensors), len(f.Tensors))
		}
	}
	for i := range base.m.Files {
		bf := &base.m.Files[i]
		if f := cur.files[bf.Path]; bf.Kind == kindSafetensors && (f == nil || f.Kind != kindSafetensors) {
			return fmt.Sprintf("safetensors file %s was removed", bf.Path)
		}
	}
	return ""
}

// RenderPatch returns the patch of version v (the file WritePatch writes) rendered in the
// cache directory, rendering it on the first call. A version without a patch gives the error
// of PatchBase; a store that fails to read (ErrCorrupt) gives its error and no file.
func (s *Store) RenderPatch(v uint64) (RenderedFile, error) { return s.renders.renderPatch(v) }

func (r *renders) renderPatch(v uint64) (RenderedFile, error) {
	cur, base, err := r.patchVersions(v)
	if err != nil {
		return RenderedFile{}, err
	}
	name := renderName(v, renderKey("patch", cur, base))
	final := r.renderDir("patches", name+".safetensors")
	rf, err := r.renderPatchCached(final, cur, base, func(p string) error { return r.writePatchFile(v, p) })
	if err != nil {
		return RenderedFile{}, fmt.Errorf("patch of version %d: %w", v, err)
	}
	r.pruneRenders("patches", v, name)
	return rf, nil
}

// writePatchFile writes the patch of v to a new file at p and syncs it.
func (r *renders) writePatchFile(v uint64, p string) error {
	return r.writePatchFileWith(p, func(f *os.File) (int64, error) { return r.writePatch(v, f) })
}

// writePatchFileWith creates a new file at p, fills it with write and syncs it.
func (r *renders) writePatchFileWith(p string, write func(*os.File) (int64, error)) error {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, cacheFilePerm)
	if err != nil {
		return fmt.Errorf("create patch file: %w", err)
	}
	_, err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close patch file: %w", cerr)
	}
	return err
}

// checkRenderedPatch opens a rendered patch and checks that its header describes the step
// from base to cur: the version numbers and every changed file's hashes are the manifests'
// (they were computed from the bytes read, so a bad read shows here), and every file the
// patch leaves out is the same in both versions.
func checkRenderedPatch(p string, cur, base *version) (RenderedFile, error) {
	f, err := openCacheFile(p)
	if err != nil {
		return RenderedFile{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return RenderedFile{}, err
	}
	patch, err := delta.OpenPatch(f, st.Size())
	if err != nil {
		return RenderedFile{}, err
	}
	plan := &patch.Plan
	if plan.ModelVersion != cur.m.Version || plan.BaseVersion != base.m.Version {
		return RenderedFile{}, fmt.Errorf("%w: patch is from version %d to %d, want %d to %d",
			ErrCorrupt, plan.BaseVersion, plan.ModelVersion, base.m.Version, cur.m.Version)
	}
	inPlan := make(map[string]bool, len(plan.Files))
	for _, pf := range plan.Files {
		inPlan[pf.Name] = true
		cf, bf := cur.files[pf.Name], base.files[pf.Name]
		switch {
		case cf == nil:
			return RenderedFile{}, fmt.Errorf("%w: patch changes %s, which version %d does not have", ErrCorrupt, pf.Name, cur.m.Version)
		case !pf.HasXXH3: // every render since renderFormat 2 records it; apply relies on it to be fast
			return RenderedFile{}, fmt.Errorf("%w: patch records no xxh3-128 of %s", ErrCorrupt, pf.Name)
		case ID(pf.ResultSHA256) != cf.SHA256:
			return RenderedFile{}, fmt.Errorf("%w: patch gives %s the SHA-256 %x, the manifest says %s", ErrCorrupt, pf.Name, pf.ResultSHA256, cf.SHA256)
		case bf == nil && pf.BaseSHA256 != [32]byte{}, bf != nil && ID(pf.BaseSHA256) != bf.SHA256:
			return RenderedFile{}, fmt.Errorf("%w: patch gives the base of %s the SHA-256 %x, which is not version %d's", ErrCorrupt, pf.Name, pf.BaseSHA256, base.m.Version)
		}
	}
	for i := range cur.m.Files {
		cf := &cur.m.Files[i]
		if bf := base.files[cf.Path]; !inPlan[cf.Path] && (bf == nil || bf.SHA256 != cf.SHA256) {
			return RenderedFile{}, fmt.Errorf("%w: patch leaves out %s, which changed", ErrCorrupt, cf.Path)
		}
	}
	return RenderedFile{Path: p, Size: st.Size()}, nil
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// syncedCreate writes data to a new file at p and syncs it.
func syncedCreate(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, cacheFilePerm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
