package fs

import "github.com/weightfs/weightfs/store"

// viewSource is what the patches/ and deltas/ views need from a version store beyond
// VersionStore: the decisions and renders of store.Store (see store/render.go and
// store/slime.go). Optional: a version store without it gets empty views.
type viewSource interface {
	// PatchBase returns the version the patch of v is taken against, or an error wrapping
	// store.ErrNoPrevious or store.ErrLayoutChanged when v has no patch.
	PatchBase(v uint64) (uint64, error)
	// RenderPatch returns the patch of v, rendered in the cache directory.
	RenderPatch(v uint64) (store.RenderedFile, error)
	// RenderPatchFrom returns the catch-up patch from version from to v, rendered in the
	// cache directory (store.ErrNoSuchVersion, ErrNoPrevious, ErrLayoutChanged: none).
	RenderPatchFrom(v, from uint64) (store.RenderedFile, error)
	// PatchNote says when v's patch carries files whole, and why ("" when it does not).
	PatchNote(v uint64) string
	// PatchSize is the size of v's patch without rendering it (ok false: render to know).
	PatchSize(v uint64) (size int64, ok bool, err error)
	// PlanSlime says how v is served in deltas/ (ErrNoSuchVersion: not at all).
	PlanSlime(v uint64) (store.SlimePlan, error)
	// RenderSlime returns the plan and, unless it is SlimeFull, the files of deltas/v.
	RenderSlime(v uint64) (store.SlimePlan, []store.RenderedFile, error)
}

func (b storeVersions) PatchBase(v uint64) (uint64, error) { return b.s.PatchBase(v) }

func (b storeVersions) RenderPatch(v uint64) (store.RenderedFile, error) {
	return b.s.RenderPatch(v)
}

func (b storeVersions) RenderPatchFrom(v, from uint64) (store.RenderedFile, error) {
	return b.s.RenderPatchFrom(v, from)
}

func (b storeVersions) PatchNote(v uint64) string { return b.s.PatchNote(v) }

func (b storeVersions) PatchSize(v uint64) (int64, bool, error) { return b.s.PatchSize(v) }

func (b storeVersions) PlanSlime(v uint64) (store.SlimePlan, error) { return b.s.PlanSlime(v) }

func (b storeVersions) RenderSlime(v uint64) (store.SlimePlan, []store.RenderedFile, error) {
	return b.s.RenderSlime(v)
}

// viewSourceOf returns the version store's renderer, if it has one.
func viewSourceOf(b VersionStore) (viewSource, bool) {
	src, ok := b.(viewSource)
	return src, ok
}
