package store

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Holds keep the versions of open files from gc, as an unlinked file stays readable through
// the descriptors open on it: the mount takes one for each open file of a sealed version (and
// for each mapping, which keeps the file open in the kernel) and releases it at the file's
// last release. Without it, a retention gc (--keep-last) that drops the version under an
// engine that mmaps a checkpoint while it loads would cut its reads off in the middle: a
// short read, then ENOENT, and SIGBUS through the mapping.
//
// In the writer's process a hold is a count that gc reads (gcPlan keeps held versions, as
// pinned ones). A read-only process cannot be seen by the writer's gc: its first hold of a
// version writes a pin record (gc_pins.go), which the writer's gc reads, and its last release
// removes it. A pin written after gc read the pins would come too late, so gc reads them once
// more after it has recorded what it drops (STORE/dropped, gc_record.go) and keeps what they
// name; and Hold, after writing its pin, refuses a version that the gc record names or whose
// manifest is gone (ErrVersionRemoved: the open fails with ENOENT, before any byte is served).
// Either gc sees the pin, or the reader sees the record. On a store that cannot hold pins (S3)
// a reader's hold protects nothing and says so once.
type holds struct {
	mu       sync.Mutex
	count    map[uint64]int
	pins     map[uint64]*Pin
	dropping map[uint64]bool // the versions a gc of this process is deleting
	unpinned atomic.Bool     // a hold without a pin was logged
	env      holdEnv
}

// holdEnv is what holds needs of its store, given once when the store is built
// (newBareStore): holds reaches no further into the store.
type holdEnv struct {
	log      *slog.Logger
	readOnly bool
	// sealed fails as OpenFile when v is not a sealed version.
	sealed func(v uint64) error
	// pin writes a reader's pin record of v (Store.Pin).
	pin func(v uint64) (*Pin, error)
	// removed says whether a gc dropped v: the gc record names it, or its manifest is gone.
	removed func(v uint64) bool
	// activePins is the set of versions named by a pin that has not expired at now (gc_pins.go).
	activePins func(now time.Time) (map[uint64]bool, error)
}

// newHoldEnv is what store s, its pins and its gc record give its holds.
func newHoldEnv(s *Store, pins *pinSet, rec *gcRecordKeeper) holdEnv {
	return holdEnv{
		log:      s.log,
		readOnly: s.readOnly,
		sealed: func(v uint64) error {
			_, err := s.versions.sealedVersion(v)
			return err
		},
		pin: s.Pin,
		removed: func(v uint64) bool {
			if r, state, _ := rec.read(); state == gcRecordOK && r.Dropped(v) {
				return true
			}
			numbers, err := s.be.ListManifests()
			return err == nil && !slices.Contains(numbers, v)
		},
		activePins: pins.active,
	}
}

// Hold keeps sealed version v from gc until release is called (once; more calls do nothing).
// It fails with ErrVersionRemoved when a gc is dropping v, and as OpenFile for a version that
// is not there.
func (s *Store) Hold(v uint64) (release func(), err error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	return s.collector.hold(v)
}

// hold is Hold, once the store is known to be open.
func (c *collector) hold(v uint64) (release func(), err error) { return c.holds.hold(v) }

// hold is Hold, once the store is known to be open.
func (h *holds) hold(v uint64) (release func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dropping[v] {
		return nil, fmt.Errorf("version %d: %w", v, ErrVersionRemoved)
	}
	if h.count[v] == 0 {
		if err := h.env.sealed(v); err != nil {
			return nil, err
		}
		if h.env.readOnly {
			pin, err := h.pinHeld(v)
			if err != nil {
				return nil, err
			}
			if pin != nil {
				if h.pins == nil {
					h.pins = map[uint64]*Pin{}
				}
				h.pins[v] = pin
			}
		}
	}
	if h.count == nil {
		h.count = map[uint64]int{}
	}
	h.count[v]++
	var once sync.Once
	return func() { once.Do(func() { h.unhold(v) }) }, nil
}

// pinHeld pins v for a reader's first hold and checks that no gc is dropping it (see holds).
// nil, nil: the store holds no pins (the hold protects nothing).
func (h *holds) pinHeld(v uint64) (*Pin, error) {
	pin, err := h.env.pin(v)
	if err != nil {
		if !h.unpinned.Swap(true) {
			h.env.log.Warn("open files are not pinned: a gc may remove their version while they are open (their reads then fail with ENOENT)", "err", err)
		}
		return nil, nil
	}
	if h.env.removed(v) {
		if err := pin.Close(); err != nil {
			h.env.log.Warn("unpin", "version", v, "err", err)
		}
		return nil, fmt.Errorf("version %d: %w", v, ErrVersionRemoved)
	}
	return pin, nil
}

func (h *holds) unhold(v uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.count[v]--; h.count[v] > 0 {
		return
	}
	delete(h.count, v)
	if pin := h.pins[v]; pin != nil {
		delete(h.pins, v)
		if err := pin.Close(); err != nil {
			h.env.log.Warn("unpin", "version", v, "err", err)
		}
	}
}

// heldVersions adds the versions this process holds to set.
func (h *holds) heldVersions(set map[uint64]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for v := range h.count {
		set[v] = true
	}
}

// beginDrop is gc's last look before it deletes manifests, after it recorded what it drops:
// the versions of drop that a reader pinned or this process took a hold of since gc planned
// are kept (late), and the rest are marked as being dropped, so that Hold refuses them until
// endDrop.
func (h *holds) beginDrop(drop []VersionInfo) (rest, late []VersionInfo, err error) {
	pins, err := h.env.activePins(time.Now())
	if err != nil {
		return nil, nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropping = map[uint64]bool{}
	for _, info := range drop {
		if pins[info.Number] || h.count[info.Number] > 0 {
			late = append(late, info)
			continue
		}
		h.dropping[info.Number] = true
		rest = append(rest, info)
	}
	return rest, late, nil
}

// endDrop ends what beginDrop marked: the versions are gone from the list by now.
func (h *holds) endDrop() {
	h.mu.Lock()
	h.dropping = nil
	h.mu.Unlock()
}

// close removes the pins of the holds still taken (Close: the mount is ending).
func (h *holds) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	for v, pin := range h.pins {
		errs = append(errs, pin.Close())
		delete(h.pins, v)
	}
	if err := errors.Join(errs...); err != nil {
		h.env.log.Warn("unpin", "err", err)
	}
}
