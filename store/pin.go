package store

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/weightfs/weightfs/internal/jsonrecord"
)

// A reader's pin keeps a version from gc while the reader serves it: a small JSON record
// STORE/pins/<32 hex digits>.json (docs/format.md §1), written by a read-only mount pinned to
// a version, renewed every PinLease/4 and removed when the mount ends. gc (the command and a
// writer's retention) keeps every version an unexpired pin names. A reader that dies leaves
// its record behind; it expires after PinLease and the next gc removes it.
//
// Pins live in local stores only: the Backend has no small-object put, list and delete for
// them, so a reader of an S3 store cannot pin (Pin says so) and learns from a read error
// naming gc when its version goes.

// PinLease is how long a pin record holds without being renewed.
const PinLease = 2 * time.Minute

// pinFormat names the pin record's layout; a record of another format is refused.
const pinFormat = "weightfs-pin-1"

// pinDir is the pins' directory in a local store.
const pinDir = "pins"

// pinRecord is the JSON content of a pin record.
type pinRecord struct {
	Format  string    `json:"format"`
	Version uint64    `json:"version"`
	Expires time.Time `json:"expires"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
}

// decodePin parses and checks a pin record.
func decodePin(b []byte) (pinRecord, error) {
	var rec pinRecord
	if err := jsonrecord.Decode(b, &rec, "pin record"); err != nil {
		return pinRecord{}, err
	}
	if rec.Format != pinFormat {
		return pinRecord{}, fmt.Errorf("pin record of format %q (this program reads %q): %w", rec.Format, pinFormat, ErrUnsupportedVersion)
	}
	if rec.Version == 0 {
		return pinRecord{}, errors.New("pin record: version 0")
	}
	if rec.Expires.IsZero() {
		return pinRecord{}, errors.New("pin record: no expiry time")
	}
	return rec, nil
}

// Pin is a reader's hold on a version; Close releases it.
type Pin struct {
	path string
	rec  pinRecord
	log  *slog.Logger

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Pin writes a pin record for version v and renews it until Close. It works on a read-only
// store too (the record is the one thing a reader writes into the store); on an S3 store it
// fails with ErrPinUnsupported.
func (s *Store) Pin(v uint64) (*Pin, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	dir, ok := s.pinDir()
	if !ok {
		return nil, fmt.Errorf("pin version %d: %w", v, ErrPinUnsupported)
	}
	var token [16]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, fmt.Errorf("pin version %d: %w", v, err)
	}
	host, _ := os.Hostname()
	p := &Pin{path: filepath.Join(dir, hex.EncodeToString(token[:])+".json"), log: s.log,
		rec:  pinRecord{Format: pinFormat, Version: v, Host: host, PID: os.Getpid()},
		stop: make(chan struct{}), done: make(chan struct{})}
	// Private, as the store (docs/format.md §1); a shared store gives it the group write bit.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pin version %d: %w", v, err)
	}
	if err := p.write(time.Now()); err != nil {
		return nil, fmt.Errorf("pin version %d: %w", v, err)
	}
	go p.renewLoop()
	return p, nil
}

// Version is the pinned version.
func (p *Pin) Version() uint64 { return p.rec.Version }

// Path is the pin record's file.
func (p *Pin) Path() string { return p.path }

// write replaces the record atomically (a temporary file renamed over it), so that gc never
// reads half a record.
func (p *Pin) write(now time.Time) error {
	rec := p.rec
	rec.Expires = now.Add(PinLease).UTC().Truncate(time.Second)
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := p.path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p.path)
}

func (p *Pin) renewLoop() {
	defer close(p.done)
	t := time.NewTicker(PinLease / 4)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			if err := p.write(now); err != nil {
				// Retried at the next tick; the record holds for PinLease from the last
				// renewal that worked.
				p.log.Warn("pin not renewed", "version", p.rec.Version, "err", err)
			}
		}
	}
}

// Close stops renewing and removes the record.
func (p *Pin) Close() error {
	var err error
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		if rerr := os.Remove(p.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = fmt.Errorf("remove pin of version %d: %w", p.rec.Version, rerr)
		}
	})
	return err
}

// pinDir is the pins' directory, and whether the store can hold pins.
func (s *Store) pinDir() (string, bool) {
	if _, ok := s.be.given.(localDirBackend); !ok {
		return "", false
	}
	return filepath.Join(s.root, pinDir), true
}

// PinInfo describes a pin record.
type PinInfo struct {
	Name    string // the record's file name
	Version uint64
	Expires time.Time
	Owner   string // "host pid N"
}

// pins reads every pin record. An unreadable record (or one of an unknown format) is an
// error: what it protects is unknown, and gc must not guess.
func (s *Store) pins() ([]PinInfo, error) {
	dir, ok := s.pinDir()
	if !ok {
		return nil, nil
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pins: %w", err)
	}
	var out []PinInfo
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue // a renewal's temporary file
		}
		if !e.Type().IsRegular() {
			// Not read: reading a FIFO would block gc until a writer came.
			return nil, fmt.Errorf("%s: pin record %w (%v; remove it if no reader uses it)",
				filepath.Join(dir, e.Name()), errNotRegular, e.Type())
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // its reader just removed it
		}
		if err != nil {
			return nil, fmt.Errorf("pins: %w", err)
		}
		rec, err := decodePin(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (remove it if no reader uses it)", filepath.Join(dir, e.Name()), err)
		}
		out = append(out, PinInfo{Name: e.Name(), Version: rec.Version, Expires: rec.Expires,
			Owner: fmt.Sprintf("%s pid %d", rec.Host, rec.PID)})
	}
	return out, nil
}

// Pins lists the store's pin records (none on an S3 store).
func (s *Store) Pins() ([]PinInfo, error) { return s.pins() }

// activePins is the set of versions named by a pin that has not expired at now.
func (s *Store) activePins(now time.Time) (map[uint64]bool, error) {
	ps, err := s.pins()
	if err != nil {
		return nil, err
	}
	out := map[uint64]bool{}
	for _, p := range ps {
		if p.Expires.After(now) {
			out[p.Version] = true
		}
	}
	return out, nil
}

// removeExpiredPins deletes the records of readers that went away without removing theirs
// (expired for a whole lease more, so that a reader whose renewals were late is not
// surprised).
func (s *Store) removeExpiredPins(now time.Time) {
	ps, err := s.pins()
	if err != nil {
		return
	}
	dir, _ := s.pinDir()
	for _, p := range ps {
		if p.Expires.Add(PinLease).Before(now) {
			if err := os.Remove(filepath.Join(dir, p.Name)); err == nil {
				s.log.Info("gc: removed an expired pin", "version", p.Version, "owner", p.Owner, "expired", p.Expires.Format(time.RFC3339))
			}
		}
	}
}
