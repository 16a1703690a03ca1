package store

import (
	"fmt"
	"io"

	"github.com/weightfs/weightfs/delta"
)

// WritePatch writes the one-file sparse patch (DESIGN §3.1) that turns the sealed version
// before v into v, and returns its size. A version without a sealed predecessor (the first,
// or the oldest kept after GC) has no patch (ErrNoPrevious).
func (s *Store) WritePatch(v uint64, w io.WriterAt) (int64, error) {
	ver, err := s.sealedVersion(v)
	if err != nil {
		return 0, err
	}
	prev, ok := s.Previous(v)
	if !ok {
		return 0, fmt.Errorf("patch of version %d: %w", v, ErrNoPrevious)
	}
	base, err := s.sealedVersion(prev)
	if err != nil {
		return 0, err
	}
	sources := make([]delta.PatchSource, 0, len(ver.m.Files))
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		src := delta.PatchSource{Name: f.Path, Result: s.newVersionFile(ver, f, readOpts{}), ResultSize: f.Size}
		if old := base.files[f.Path]; old != nil {
			src.Base, src.BaseSize = s.newVersionFile(base, old, readOpts{}), old.Size
		}
		sources = append(sources, src)
	}
	plan, err := delta.BuildPatch(w, v, prev, sources)
	if err != nil {
		return 0, fmt.Errorf("patch of version %d: %w", v, err)
	}
	_, size, err := delta.EncodePatchHeader(plan)
	if err != nil {
		return 0, fmt.Errorf("patch of version %d: %w", v, err)
	}
	return size, nil
}
