package fs

import (
	"slices"
	"time"

	"github.com/weightfs/weightfs/store"
)

// poller makes versions sealed by another process appear on a read-only mount: it looks every
// interval (store.Poll where the store has it: a cheap look at the backend's change hint, and
// a Refresh only when it moved; else Refresh) and tells the kernel about root entries that
// came or went.
type poller struct {
	quit chan struct{}
	done chan struct{}
}

func startPoller(m *mountState, interval time.Duration) *poller {
	p := &poller{quit: make(chan struct{}), done: make(chan struct{})}
	go p.run(m, interval)
	return p
}

func (p *poller) stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
}

func (p *poller) run(m *mountState, interval time.Duration) {
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
		m.noticeVersions()
	}
}

// storePoller is the store's cheap look for new versions (store.Store.Poll).
type storePoller interface {
	Poll() (store.PollResult, error)
}

// poll looks for new versions once.
func (m *mountState) poll() error {
	if p, ok := m.b.(storePoller); ok {
		_, err := p.Poll()
		return err
	}
	return m.b.Refresh()
}

// noticeVersions compares the store's versions with the last seen list and invalidates the
// kernel's view of the root entries that changed.
func (m *mountState) noticeVersions() {
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
		return
	}
	for _, name := range changed {
		m.notifyEntry(name)
	}
	m.notifyEntry(latestName)
	if m.root != nil {
		_ = m.root.NotifyContent(0, 0) // the root's attributes and any cached listing
	}
}
