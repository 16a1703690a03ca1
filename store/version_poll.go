package store

import (
	"sync"
	"time"
)

// Learning of new versions cheaply: a reader polls, and a poll that lists the manifests costs
// a LIST request on a remote store. A backend that keeps a change hint (store/s3: a small
// object the writer rewrites at every seal and gc, read by a conditional GET that is answered
// 304 while it has not moved) lets a reader look often and list only when the hint moved
// (docs/s3.md, "Readers"; docs/format.md Part I §4.3). The hint is only a reason to list:
// what the reader shows comes from the listing and the manifests, checked as always, so a
// forged or damaged hint can at most make it list sooner.

// VersionHinter is the optional part of a Backend that can tell cheaply whether the list of
// manifests may have changed.
type VersionHinter interface {
	// VersionsHint reports whether the manifests may have changed since its previous call:
	// changed is true at the first call and whenever the hint moved. ok is false when there
	// is no usable hint (none written yet, a writer that predates hints, a hint refused as
	// damaged or of an unknown format); err is a failed request (ok is then false too).
	VersionsHint() (changed, ok bool, err error)
}

// Listing rates of Poll.
const (
	// PollListEvery is how often Poll lists although the hint has not moved: a writer that
	// died between a manifest and its hint, or a hint lost, is seen within this time.
	PollListEvery = 30 * time.Second
	// PollNoHintEvery is how often Poll lists while the backend has no usable hint: the
	// rate of the plain polls before hints (one LIST a second on S3).
	PollNoHintEvery = time.Second
)

// pollState is what Poll remembers between calls.
type pollState struct {
	mu     sync.Mutex
	listed time.Time // the last Refresh that succeeded
	owed   bool      // the hint moved and the Refresh after it failed: list at the next call
}

// PollResult says what one Poll did.
type PollResult struct {
	Listed bool // it refreshed (listed the manifests)
	Hinted bool // the backend's hint was asked and was usable
}

// Poll is Refresh for a reader that asks often. Where the backend keeps a change hint
// (VersionHinter), it asks it and refreshes only when it moved, when PollListEvery has passed
// since the last refresh, or, while there is no usable hint, when PollNoHintEvery has; a
// refresh that failed is owed and made at the next call. Without a hint it refreshes every
// call (the caller's interval is then the listing rate).
func (s *Store) Poll() (PollResult, error) {
	h := s.be.hinter
	if h == nil {
		return PollResult{Listed: true}, s.Refresh()
	}
	if err := s.checkOpen(); err != nil {
		return PollResult{}, err
	}
	return s.versions.pollHint(h, s.Refresh)
}

// pollHint is Poll on a backend that keeps a change hint: it asks h, and calls refresh when
// a listing is due.
func (vl *versionList) pollHint(h VersionHinter, refresh func() error) (PollResult, error) {
	changed, usable, herr := h.VersionsHint()
	p := &vl.poll
	p.mu.Lock()
	since := time.Since(p.listed)
	due := p.owed || changed || since >= PollListEvery || !usable && since >= PollNoHintEvery
	p.mu.Unlock()
	res := PollResult{Hinted: usable}
	if !due {
		return res, herr
	}
	err := refresh()
	res.Listed = true
	p.mu.Lock()
	if err == nil {
		p.listed, p.owed = time.Now(), false
	} else {
		p.owed = true
	}
	p.mu.Unlock()
	return res, err
}
