package fs

import (
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
)

// What a mount did since it started, for an operator's metrics (the metrics package turns
// them into Prometheus series; this package knows nothing of Prometheus). The counts are
// kept where the requests are answered, so a scrape reads what the mount did.

// Behind buckets: how many sealed versions are newer than the version a read is of. Bounded,
// so that a metric labelled by them has four series whatever the store holds.
const (
	BehindLatest  = iota // "0": the latest version
	BehindOne            // "1": the version before it
	BehindFew            // "2-9"
	BehindMany           // "10+"
	BehindBuckets        // how many buckets there are
)

// BehindLabels name the Behind buckets, in their order.
var BehindLabels = [BehindBuckets]string{"0", "1", "2-9", "10+"}

// behindBucket is the bucket of a read of a version that newer sealed versions follow.
func behindBucket(newer int) int {
	switch {
	case newer <= 0:
		return BehindLatest
	case newer == 1:
		return BehindOne
	case newer < 10:
		return BehindFew
	}
	return BehindMany
}

// Stats are the cumulative counts of a mount (Server.Stats).
type Stats struct {
	// ReadRequests and ReadBytes count the READ requests answered from files of sealed
	// versions (not the views patches/ and deltas/, not open versions), and the bytes they
	// returned, by the Behind bucket of the version read at the time of the read.
	ReadRequests [BehindBuckets]int64
	ReadBytes    [BehindBuckets]int64
	// Errors counts the operations the mount failed or refused, by the errno it returned:
	// every store or staging failure (EIO for damage, ENOSPC, ...) and every refusal (EPERM
	// or EROFS for a change of something immutable, ENAMETOOLONG, ...). A lookup of a name
	// that does not exist (ENOENT), the kernel's ordinary question, is not counted.
	Errors map[syscall.Errno]int64
	// PatchesAhead counts the patches of new versions rendered as soon as the versions were
	// seen, before anyone asked (a read-only mount whose patches/ is read: poll.go).
	PatchesAhead int64
}

// Errnos lists the errnos of Errors, ascending.
func (s Stats) Errnos() []syscall.Errno {
	out := make([]syscall.Errno, 0, len(s.Errors))
	for e := range s.Errors {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// mountStats are the live counters behind Stats.
type mountStats struct {
	readRequests [BehindBuckets]atomic.Int64
	readBytes    [BehindBuckets]atomic.Int64
	errMu        sync.Mutex
	errors       map[syscall.Errno]int64
	patchesAhead atomic.Int64
}

func (c *mountStats) snapshot() Stats {
	var st Stats
	for i := range BehindBuckets {
		st.ReadRequests[i] = c.readRequests[i].Load()
		st.ReadBytes[i] = c.readBytes[i].Load()
	}
	c.errMu.Lock()
	st.Errors = make(map[syscall.Errno]int64, len(c.errors))
	for e, n := range c.errors {
		st.Errors[e] = n
	}
	c.errMu.Unlock()
	st.PatchesAhead = c.patchesAhead.Load()
	return st
}

// countErrno counts an errno the mount returns for a failed or refused operation.
func (c *mountStats) countErrno(e syscall.Errno) {
	if e == 0 {
		return
	}
	c.errMu.Lock()
	if c.errors == nil {
		c.errors = map[syscall.Errno]int64{}
	}
	c.errors[e]++
	c.errMu.Unlock()
}

// countRead counts a READ of n bytes answered from sealed version v.
func (m *mountState) countRead(v uint64, n int) {
	b := behindBucket(m.b.NewerVersions(v))
	m.stats.readRequests[b].Add(1)
	m.stats.readBytes[b].Add(int64(n))
}

// Stats returns what the mount did since it started.
func (s *Server) Stats() Stats { return s.m.stats.snapshot() }
