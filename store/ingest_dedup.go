package store

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// absent reports that object id is surely not stored, without a syscall: it has no live
// record in a pack and the backend holds no loose objects at all (a store written with packs
// only). The dedup check before each new object (existsToWrite) asks it first: with tens of
// thousands of tensors a version, the stat of a loose file that is not there was a syscall per
// changed tensor. A wrong "absent" can only come from a loose object another process put in
// the last looseRecheck: the object is then written into a pack as well, which readers and gc
// allow (an id in a pack wins over its loose file).
func (p *packedObjects) absent(id ID) bool {
	if _, _, ok := p.lookup(id); ok {
		return false
	}
	lb, ok := p.Backend.(interface{ NoLooseObjects() bool })
	return ok && lb.NoLooseObjects()
}

// existsToWrite is exists for the check before an object is written (dedup): absent first.
func (in *ingester) existsToWrite(id ID) bool {
	if p := in.st.be.packs; p != nil && p.absent(id) {
		return false
	}
	return in.exists(id)
}

// looseRecheck is how long the local backend trusts that objects/ was empty.
const looseRecheck = time.Second

// looseCheck remembers whether the local backend's objects/ held nothing when last looked at.
type looseCheck struct {
	mu   sync.Mutex
	at   time.Time // when objects/ was last read; zero: never, or a loose object put since
	none bool
	// stats counts StatObject calls (a stat of a loose file each): tests.
	stats atomic.Int64
}

// NoLooseObjects reports that objects/ has no entry (no fan-out directory: no loose object
// was ever put, or every one was removed with its directory), read at most once a
// looseRecheck.
func (b *localBackend) NoLooseObjects() bool {
	c := &b.loose
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); c.at.IsZero() || now.Sub(c.at) >= looseRecheck {
		c.none, c.at = dirEmpty(filepath.Join(b.root, "objects")), now
	}
	return c.none
}

// SawLoose forgets what NoLooseObjects read: this process puts a loose object.
func (b *localBackend) SawLoose() {
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
