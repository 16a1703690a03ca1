package store

import (
	"fmt"

	"github.com/weightfs/weightfs/delta"
)

// Planning a page's reconstruction: where to start (a full object, the materialized copy, a
// cached page) and which deltas to apply, forward or backward, choosing the cheapest.

// plan is how to reconstruct a page of an object: a whole copy to start from (a full
// object, the materialized copy, or a cached page of another object), then deltas to apply.
type plan struct {
	start     ID
	fromMat   bool // start is read from the materialized copy
	fromCache bool // start is the cached page of start
	steps     []planStep
}

// planStep applies the delta section of object obj in direction dir.
type planStep struct {
	obj ID
	dir delta.Direction
}

// planWalker plans the reconstruction of one page.
type planWalker struct {
	s     *objectStore
	view  *matView
	cache *lru[pageKey, *cachedPage] // nil: do not start from cached pages
	pg    int64
}

// whole reports whether the page of cur can be had without applying a delta, and how.
func (w *planWalker) whole(cur ID, m objMeta) (plan, bool) {
	if w.cache != nil && w.cache.has(pageKey{cur, w.pg}) {
		return plan{start: cur, fromCache: true}, true
	}
	if w.view.holds(cur) {
		return plan{start: cur, fromMat: true}, true
	}
	if m.Kind == kindFull {
		return plan{start: cur}, true
	}
	return plan{}, false
}

// planFor chooses the cheapest way to reconstruct id's page: forward from the whole copy its
// base chain leads to, or backward from a whole copy of a later version of the same object
// (the materialized latest, or an anchor whose link walks back). chain lists the objects a
// failed walk passed.
func (w *planWalker) planFor(id ID, hint objHint) (plan, []ID, error) {
	fwd, chain, ferr := w.forward(id)
	if ferr == nil && len(fwd.steps) == 0 {
		return fwd, nil, nil
	}
	limit := maxWalk
	if ferr == nil {
		limit = len(fwd.steps)
	}
	if bwd, ok := w.backward(id, hint, limit); ok {
		return bwd, nil, nil
	}
	return fwd, chain, ferr
}

func (w *planWalker) forward(id ID) (plan, []ID, error) {
	var chain []ID // id, its base, its base's base, ...
	cur := id
	for {
		m, err := w.s.meta(cur)
		if err != nil {
			return plan{}, append(chain, cur), err
		}
		if p, ok := w.whole(cur, m); ok {
			p.steps = make([]planStep, len(chain))
			for i, c := range chain {
				p.steps[len(chain)-1-i] = planStep{c, delta.Forward}
			}
			return p, nil, nil
		}
		chain = append(chain, cur)
		if len(chain) > maxWalk {
			return plan{}, chain, objectError(id, fmt.Errorf("delta chain longer than %d: %w", maxWalk, ErrCorrupt))
		}
		cur = m.Base
	}
}

// backward walks from the latest version's object at hint's place up its base links to id,
// and starts from the whole copy on that path nearest to id. ok is false when there is no
// such path or it costs more than limit steps.
func (w *planWalker) backward(id ID, hint objHint, limit int) (plan, bool) {
	if hint.path == "" {
		return plan{}, false
	}
	var latest *version
	if w.view != nil {
		latest = w.view.ver
	} else if ver, err := w.s.st.versions.latestVersion(); err == nil && ver != nil {
		latest = ver
	}
	if latest == nil {
		return plan{}, false
	}
	d0, ok := latest.objectAt(hint)
	if !ok || d0 == id {
		return plan{}, false
	}
	path := []ID{d0}
	var best plan
	bestAt := -1
	for cur := d0; cur != id; {
		m, err := w.s.meta(cur)
		if err != nil || m.DeltaLen == 0 || len(path) > 4*w.s.st.maxChain+limit {
			return plan{}, false
		}
		if p, ok := w.whole(cur, m); ok {
			best, bestAt = p, len(path)-1
		}
		cur = m.Base
		path = append(path, cur)
	}
	// On a tie the backward walk wins: its start is usually the materialized copy or a cached
	// page (a pread or a copy), where the forward walk's is a whole object to decompress.
	if bestAt < 0 || len(path)-1-bestAt > limit {
		return plan{}, false
	}
	for _, c := range path[bestAt : len(path)-1] {
		best.steps = append(best.steps, planStep{c, delta.Backward})
	}
	return best, true
}
