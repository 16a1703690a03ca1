package local

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// A store written with packs only has no loose objects: store's dedup check before each new
// object asks NoLooseObjects before it stats a loose file that is not there
// (store/ingest_dedup.go).

// looseRecheck is how long the local backend trusts that objects/ was empty.
const looseRecheck = time.Second

// looseCheck remembers whether the local backend's objects/ held nothing when last looked at.
type looseCheck struct {
	mu   sync.Mutex
	at   time.Time // when objects/ was last read; zero: never, or a loose object put since
	none bool
	// stats counts StatObject calls (a stat of a loose file each): StatObjectCalls.
	stats atomic.Int64
}

// StatObjectCalls is how many times StatObject was called (a stat of a loose file each):
// tests count the ones a version's ingest makes.
func (b *Backend) StatObjectCalls() int64 { return b.loose.stats.Load() }

// NoLooseObjects reports that objects/ has no entry (no fan-out directory: no loose object
// was ever put, or every one was removed with its directory), read at most once a
// looseRecheck.
func (b *Backend) NoLooseObjects() bool {
	c := &b.loose
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); c.at.IsZero() || now.Sub(c.at) >= looseRecheck {
		c.none, c.at = dirEmpty(filepath.Join(b.root, ObjectDir)), now
	}
	return c.none
}

// SawLoose forgets what NoLooseObjects read: this process puts a loose object.
func (b *Backend) SawLoose() {
	b.loose.mu.Lock()
	b.loose.at, b.loose.none = time.Time{}, false
	b.loose.mu.Unlock()
}

// dirEmpty reports that dir exists and has no entry (false on any error: not known empty).
func dirEmpty(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return errors.Is(err, io.EOF)
}
