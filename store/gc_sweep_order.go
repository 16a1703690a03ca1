package store

// The order of a sweep's deletions. Objects of dropped versions are deltas on each other (a
// delta's base, and the context of a version-2 section, is its base object), and a sweep
// stopped half way (a kill, a crash, a failed delete) leaves some of them behind. Deleting a
// base before the objects coded against it would leave objects that no read can rebuild, and
// that Verify, which rebuilds every object, would report as damage of a store whose versions
// are all intact. So a sweep deletes an object only once no object still to be deleted is
// coded against it: at every point, every object in the store has its base and context.

// sweepOrder orders victims so that each comes before its base (and so before the context of
// its delta section) when both are victims. An object whose header cannot be read counts as
// having no base; a cycle of bases (only a forged store has one) is deleted last, in the order
// listed.
func (c *collector) sweepOrder(victims []victim) []victim {
	index := make(map[ID]int, len(victims))
	for i, v := range victims {
		index[v.id] = i
	}
	base := make([]int, len(victims)) // the victim each one is coded against; -1: none
	waiting := make([]int, len(victims))
	for i, v := range victims {
		base[i] = -1
		m, err := c.st.objects.meta(v.id)
		if err != nil || m.Base == (ID{}) {
			continue
		}
		if j, ok := index[m.Base]; ok && j != i {
			base[i] = j
			waiting[j]++
		}
	}
	out := make([]victim, 0, len(victims))
	done := make([]bool, len(victims))
	var ready []int
	for i := range victims {
		if waiting[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		i := ready[len(ready)-1]
		ready = ready[:len(ready)-1]
		out = append(out, victims[i])
		done[i] = true
		if j := base[i]; j >= 0 {
			if waiting[j]--; waiting[j] == 0 {
				ready = append(ready, j)
			}
		}
	}
	for i, v := range victims {
		if !done[i] {
			out = append(out, v)
		}
	}
	return out
}
