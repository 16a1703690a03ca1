package fs

import "github.com/weightfs/weightfs/store"

// What the patches/ and deltas/ views need of a store (VersionStore's view methods): the
// decisions and renders of store.Store (see store/render.go and store/render_slime.go).

// RendersViews: a store renders both views.
func (b storeVersions) RendersViews() bool { return true }

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
