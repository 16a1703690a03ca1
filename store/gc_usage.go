package store

import "fmt"

// Usage is what a store holds on disk, attributed to versions (weightfs log).
type Usage struct {
	// Versions, ascending: each version's OwnBytes are the stored bytes of the objects it
	// needs (its own and, through delta chains, their bases) that no older version needs. A
	// version's OwnBytes are what dropping it alone would free if no newer version needed
	// them; the sum over all versions is the bytes every version together needs.
	Versions []VersionUsage
	// Unreferenced are the bytes of objects no version needs (an open writer's, or left by
	// an interrupted one until the next sweep), and of those only a damaged manifest or
	// object leads to (verify reports the damage).
	Unreferenced int64
	// Total is the sum of the sizes of every object file: what the objects take in the store.
	// It equals the sum of OwnBytes plus Unreferenced.
	Total   int64
	Objects int // how many object files
}

// VersionUsage is one version's line of Usage.
type VersionUsage struct {
	Number   uint64
	OwnBytes int64 // stored bytes of the objects it is the oldest to need
	Objects  int   // how many such objects
}

// Usage attributes the stored objects to the versions (see Usage). It reads every version's
// manifest and the headers of its objects.
func (s *Store) Usage() (Usage, error) {
	var u Usage
	if err := s.checkOpen(); err != nil {
		return u, err
	}
	sizes := map[ID]int64{}
	if err := s.be.ListObjects(func(id ID, size int64) error {
		sizes[id] = size
		u.Total += size
		u.Objects++
		return nil
	}); err != nil {
		return u, fmt.Errorf("usage: %w", err)
	}
	counted := map[ID]bool{}
	for _, info := range s.Versions() {
		ver, err := s.versions.loadVersion(info.Number)
		if err != nil {
			continue // a damaged manifest: listed as damaged by log, its objects unreferenced here
		}
		roots := map[ID]bool{}
		manifestRoots(ver.m, roots)
		vu := VersionUsage{Number: info.Number}
		// Each chain is walked until an object an older version counted (its bases were
		// counted with it): every object header is read once for the whole store.
		for id := range roots {
			for cur, n := id, 0; !counted[cur]; n++ {
				counted[cur] = true
				if size, ok := sizes[cur]; ok {
					vu.OwnBytes += size
					vu.Objects++
				}
				m, err := s.objects.meta(cur)
				if err != nil || m.Kind != kindDelta {
					// A damaged or missing object (verify reports it): its bases, if any,
					// count as unreferenced; log still shows the store.
					break
				}
				if n > maxWalk {
					return u, fmt.Errorf("usage: version %d: object %s: delta chain longer than %d: %w", info.Number, id, maxWalk, ErrCorrupt)
				}
				cur = m.Base
			}
		}
		u.Versions = append(u.Versions, vu)
	}
	u.Unreferenced = u.Total
	for _, vu := range u.Versions {
		u.Unreferenced -= vu.OwnBytes
	}
	return u, nil
}
