package fs

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// poller makes versions sealed by another process appear on a read-only mount, and on a rank's
// mount of a writer group (whose publisher seals the versions): it looks every interval
// (VersionStore.Poll, store.Store.Poll: a cheap look at the backend's change hint, and a
// Refresh only when it moved) and tells the kernel about root entries that came
// or went. A mount pinned to one version (Options.Version) polls too, without changing what
// it serves: the store's list, which the metrics report (latest version, versions), stays
// true.
type poller struct {
	quit chan struct{}
	done chan struct{}

	ahead     sync.WaitGroup // the render ahead in flight
	rendering atomic.Bool    // one render ahead at a time
}

// startPoller polls every interval; follow: the root follows the versions found (else the
// mount is pinned, and only the store's list is refreshed).
func startPoller(m *mountState, interval time.Duration, follow bool) *poller {
	p := &poller{quit: make(chan struct{}), done: make(chan struct{})}
	go p.run(m, interval, follow)
	return p
}

// pollMode says whether a mount polls the store for versions, and whether its root follows
// them: a read-only mount and a rank's do; one pinned to a version refreshes the store's list
// only.
func pollMode(b VersionStore, opts Options) (poll, follow bool) {
	rank := b.SealedElsewhere()
	switch {
	case opts.ReadOnly && opts.Version != 0:
		return true, false
	case opts.ReadOnly, rank && opts.Version == 0:
		return true, true
	}
	return false, false
}

func (p *poller) stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
	p.ahead.Wait()
}

func (p *poller) run(m *mountState, interval time.Duration, follow bool) {
	defer close(p.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	lastErr := ""
	for {
		select {
		case <-p.quit:
			return
		case <-tick.C:
		}
		if err := m.poll(); err != nil {
			// Say it once, not every tick. Sealed versions stay readable meanwhile (from
			// the materialized copy and cached objects; a read that needs the unreachable
			// store fails with EIO, never with other bytes).
			if msg := err.Error(); msg != lastErr {
				m.log.Warn("refresh failed (trying again every "+interval.String()+")", "err", err)
				lastErr = msg
			}
			continue
		}
		if lastErr != "" {
			m.log.Info("refresh: working again")
		}
		lastErr = ""
		if !follow {
			continue
		}
		// Whether patches are read is taken before the versions are noticed, so a version
		// seen before anyone looked at patches/ is never rendered ahead.
		pv := m.patchView.Load()
		if v, up := m.noticeVersions(); up && pv != nil {
			p.renderAhead(m, pv, v)
		}
	}
}

// renderAhead renders the patch of v, the new latest version, once patches are read on this
// mount (mountState.patchesWanted): a follower asks for exactly that patch next
// (weight_vN.from_vK with K the version before, which is the same file), and finds it made
// or being made (it waits on the same lock) instead of starting the render when it looks.
// One render ahead at a time: a version that comes during one is rendered when asked for.
func (p *poller) renderAhead(m *mountState, pv *patchesView, v uint64) {
	if !p.rendering.CompareAndSwap(false, true) {
		return
	}
	p.ahead.Add(1)
	go func() {
		defer p.ahead.Done()
		defer p.rendering.Store(false)
		start := time.Now()
		if rf, errno := pv.render(v, PatchName(v)); errno == 0 {
			m.stats.patchesAhead.Add(1)
			m.log.Info("patch rendered ahead", "file", pv.where+"/"+PatchName(v), "bytes", rf.Size, "in", time.Since(start).Round(time.Millisecond).String())
		}
	}()
}

// patchesWanted notes that something reads patches/ on this mount (a follower, an engine that
// applies patches): from now on the poller renders each new version's patch as soon as the
// version is seen.
func (m *mountState) patchesWanted(p *patchesView) {
	if m.patchView.Load() == nil {
		m.patchView.CompareAndSwap(nil, p)
	}
}

// poll looks for new versions once.
func (m *mountState) poll() error {
	_, err := m.b.Poll()
	return err
}

// noticeVersions compares the store's versions with the last seen list and invalidates the
// kernel's view of the root entries that changed; up says that the latest version moved up
// (to latest).
func (m *mountState) noticeVersions() (latest uint64, up bool) {
	now := versionNumbers(m.b.Versions())
	m.mu.Lock()
	before := m.seen
	m.seen = now
	var changed []string
	for _, v := range now {
		if _, found := slices.BinarySearch(before, v); !found {
			changed = append(changed, VersionName(v))
			m.log.Info("version seen", "version", v)
		}
	}
	for _, v := range before {
		if _, found := slices.BinarySearch(now, v); !found {
			changed = append(changed, VersionName(v))
			delete(m.indexes, v) // gc dropped it
			m.log.Info("version gone (gc)", "version", v)
		}
	}
	m.mu.Unlock()
	if len(changed) == 0 {
		return 0, false
	}
	if n := len(now); n > 0 && (len(before) == 0 || now[n-1] > before[len(before)-1]) {
		latest, up = now[n-1], true
	}
	for _, name := range changed {
		m.notifyEntry(name)
	}
	m.notifyEntry(latestName)
	if m.root != nil {
		_ = m.root.NotifyContent(0, 0) // the root's attributes and any cached listing
	}
	return latest, up
}
