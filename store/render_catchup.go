package store

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Catch-up patches: the patch from any sealed version K to a later sealed version N, for a
// reader that holds K (it was restarting, or slow) and wants N in one file rather than one
// patch per step. WritePatchFrom builds it from the store's deltas (store/render_patch.go); this
// file renders it into the cache directory, beside the one-step patches:
//
//	CACHE/render/catchup/vNNNNNN-fromKKKKKK-KEY.safetensors
//
// KEY is renderKey over N and K, so a render is reused only for the same two versions' files.

// catchupKeep bounds the catch-up renders the cache keeps: each pair (K, N) is its own file,
// and followers ask for a handful of recent pairs.
const catchupKeep = 32

// patchVersionsFrom returns versions v and from when a catch-up patch from from to v exists:
// both sealed, from below v, and the same tensor layout in both (as for a one-step patch;
// versions in between may differ, only the two ends matter to the patch).
func (r *renders) patchVersionsFrom(v, from uint64) (cur, base *version, err error) {
	if cur, err = r.st.versions.sealedVersion(v); err != nil {
		return nil, nil, err
	}
	if from >= v {
		return nil, nil, fmt.Errorf("patch of version %d from %d: %w (the base must be an earlier version)", v, from, ErrNoPrevious)
	}
	if base, err = r.st.versions.sealedVersion(from); err != nil {
		return nil, nil, fmt.Errorf("patch of version %d from %d: %w", v, from, err)
	}
	if why := tensorLayoutChange(base, cur); why != "" {
		return nil, nil, fmt.Errorf("patch of version %d: %w since version %d: %s", v, ErrLayoutChanged, from, why)
	}
	return cur, base, nil
}

// PatchBaseFrom reports whether a catch-up patch from version from to v exists: nil, or the
// error WritePatchFrom would give (ErrNoSuchVersion, ErrNoPrevious, ErrLayoutChanged).
func (s *Store) PatchBaseFrom(v, from uint64) error {
	_, _, err := s.renders.patchVersionsFrom(v, from)
	return err
}

// RenderPatchFrom returns the catch-up patch from version from to v (the file WritePatchFrom
// writes) rendered in the cache directory, rendering it on the first call. When from is v's
// predecessor it is the one-step patch, RenderPatch's file.
func (s *Store) RenderPatchFrom(v, from uint64) (RenderedFile, error) {
	return s.renders.renderPatchFrom(v, from)
}

func (r *renders) renderPatchFrom(v, from uint64) (RenderedFile, error) {
	if prev, ok := r.st.Previous(v); ok && prev == from {
		return r.renderPatch(v)
	}
	cur, base, err := r.patchVersionsFrom(v, from)
	if err != nil {
		return RenderedFile{}, err
	}
	pair := fmt.Sprintf("v%06d-from%06d", v, from)
	name := pair + "-" + renderKey("catchup", cur, base)
	final := r.renderDir("catchup", name+".safetensors")
	rf, err := r.renderPatchCached(final, cur, base, func(p string) error {
		return r.writePatchFileWith(p, func(f *os.File) (int64, error) { return r.writePatchBetween(base, cur, f) })
	})
	if err != nil {
		return RenderedFile{}, fmt.Errorf("patch of version %d from %d: %w", v, from, err)
	}
	r.pruneCatchup(pair, name)
	return rf, nil
}

// pruneCatchup removes the catch-up renders of pair under another key, those of versions no
// longer sealed, and all but the catchupKeep newest (by version, then base) of the rest.
func (r *renders) pruneCatchup(pair, keep string) {
	dir := r.renderDir("catchup")
	ents, _ := os.ReadDir(dir)
	var live []string
	for _, e := range ents {
		if sums, ok := strings.CutSuffix(e.Name(), patchSumsSuffix); ok {
			// A patch's sums go with it (removePatch); sums left without one go now.
			if !fileExists(filepath.Join(dir, sums+".safetensors")) {
				os.Remove(filepath.Join(dir, e.Name()))
			}
			continue
		}
		base := strings.TrimSuffix(e.Name(), ".safetensors")
		var v, from uint64
		var key string
		n, _ := fmt.Sscanf(strings.ReplaceAll(base, "-", " "), "v%d from%d %s", &v, &from, &key)
		if n != 3 {
			continue
		}
		_, verr := r.st.versions.sealedVersion(v)
		_, ferr := r.st.versions.sealedVersion(from)
		if (strings.HasPrefix(base, pair+"-") && base != keep) || verr != nil || ferr != nil {
			if err := removePatch(filepath.Join(dir, e.Name())); err != nil {
				r.log.Warn("remove stale render", "render", e.Name(), "err", err)
			}
			continue
		}
		if base != keep {
			live = append(live, e.Name())
		}
	}
	if len(live) < catchupKeep {
		return
	}
	slices.Sort(live) // zero-padded numbers: name order is (version, base) order
	for _, name := range live[:len(live)-catchupKeep+1] {
		removePatch(filepath.Join(dir, name))
	}
}
