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
	// an interrupted one until the next sweep).
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
		ver, err := s.loadVersion(info.Number)
		if err != nil {
			return u, fmt.Errorf("usage: %w", err)
		}
		roots := map[ID]bool{}
		ver.m.roots(roots)
		live, err := s.liveSetWhole(roots, nil)
		if err != nil {
			return u, fmt.Errorf("usage: version %d: %w", info.Number, err)
		}
		vu := VersionUsage{Number: info.Number}
		for id := range live {
			if counted[id] {
				continue
			}
			counted[id] = true
			if size, ok := sizes[id]; ok {
				vu.OwnBytes += size
				vu.Objects++
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
