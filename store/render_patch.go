package store

import (
	"errors"
	"fmt"
	"io"

	"github.com/weightfs/weightfs/delta"
)

// WritePatch writes the one-file sparse patch (docs/format.md Part III §2) that turns the sealed version
// before v into v, and returns its size. A version without a sealed predecessor (the first,
// or the oldest kept after GC) has no patch (ErrNoPrevious).
func (s *Store) WritePatch(v uint64, w io.WriterAt) (int64, error) { return s.renders.writePatch(v, w) }

func (r *renders) writePatch(v uint64, w io.WriterAt) (int64, error) {
	ver, err := r.st.versions.sealedVersion(v)
	if err != nil {
		return 0, err
	}
	prev, ok := r.st.Previous(v)
	if !ok {
		return 0, fmt.Errorf("patch of version %d: %w", v, ErrNoPrevious)
	}
	base, err := r.st.versions.sealedVersion(prev)
	if err != nil {
		return 0, err
	}
	return r.writePatchBetween(base, ver, w)
}

// WritePatchFrom writes the catch-up patch from the sealed version from to the sealed version
// v (from < v): the patch format of WritePatch with base_version = from, carrying every
// element that differs between the two with v's value, so that one patch takes a reader that
// holds from straight to v. Its size tracks the union of the elements changed by the steps in
// between, not their sum. Both versions are read tensor by tensor in bounded chunks through
// the store's delta chains, never materialised whole. A pair whose tensor layouts differ has
// no patch (ErrLayoutChanged), nor does a from that is not sealed (ErrNoSuchVersion) or not
// below v (ErrNoPrevious). WritePatchFrom(v, Previous(v)) writes WritePatch's bytes.
func (s *Store) WritePatchFrom(v, from uint64, w io.WriterAt) (int64, error) {
	cur, base, err := s.renders.patchVersionsFrom(v, from)
	if err != nil {
		return 0, err
	}
	return s.renders.writePatchBetween(base, cur, w)
}

// writePatchBetween writes the patch that turns version base into cur.
func (r *renders) writePatchBetween(base, ver *version, w io.WriterAt) (int64, error) {
	v, prev := ver.m.Version, base.m.Version
	sources := make([]delta.PatchSource, 0, len(ver.m.Files))
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		src := delta.PatchSource{Name: f.Path, Result: r.st.newVersionFile(ver, f, readOpts{}), ResultSize: f.Size}
		if old := base.files[f.Path]; old != nil {
			src.Base, src.BaseSize = r.st.newVersionFile(base, old, readOpts{}), old.Size
		}
		sources = append(sources, src)
	}
	// Shapes: engines that map checkpoint coordinates (vLLM's sparse updates) need them, and
	// PatchSize counts them.
	opts := delta.PatchBuildOptions{Shapes: true}
	if p, ok := r.st.Previous(v); ok && p == prev && !r.referencePatch {
		// One step: from the deltas, unless they do not fit (render_fast.go).
		plan, err := r.writeFastPatch(base, ver, w, opts)
		if err == nil {
			_, size, err := delta.EncodePatchHeader(plan)
			if err != nil {
				return 0, fmt.Errorf("patch of version %d from %d: %w", v, prev, err)
			}
			return size, nil
		}
		if !errors.Is(err, errNoFastPatch) {
			return 0, fmt.Errorf("patch of version %d from %d: %w", v, prev, err)
		}
		r.log.Debug("patch from the full versions", "version", v, "base", prev, "why", err)
	}
	plan, err := delta.BuildPatchWith(w, v, prev, sources, opts)
	if err != nil {
		return 0, fmt.Errorf("patch of version %d from %d: %w", v, prev, err)
	}
	_, size, err := delta.EncodePatchHeader(plan)
	if err != nil {
		return 0, fmt.Errorf("patch of version %d from %d: %w", v, prev, err)
	}
	return size, nil
}
