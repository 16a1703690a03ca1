package store

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/weightfs/weightfs/store/format"
)

// A reader's pin keeps a version from gc while the reader serves it: a small JSON record
// STORE/pins/<32 hex digits>.json (docs/format.md §1), written by a read-only mount pinned to
// a version, renewed every PinLease/4 and removed when the mount ends. gc (the command and a
// writer's retention) keeps every version an unexpired pin names. A reader that dies leaves
// its record behind; it expires after PinLease and the next gc removes it.
//
// Pins are the backend's RecordPin records (Records). They live in local stores only:
// store/s3 keeps none, so a reader of an S3 store cannot pin (Pin says so) and learns from a
// read error naming gc when its version goes.

// PinLease is how long a pin record holds without being renewed.
const PinLease = 2 * time.Minute

// The pin record's bytes are package store/format's (format/pin.go).
const (
	pinFormat = format.PinFormat
	// pinDir is the pins' directory in a local store.
	pinDir = format.PinDir
)

type pinRecord = format.PinRecord

// decodePin parses and checks a pin record.
func decodePin(b []byte) (pinRecord, error) { return format.DecodePin(b) }

// Pin is a reader's hold on a version; Close releases it.
type Pin struct {
	records Records
	name    string // the record's name: 32 hex digits and ".json"
	rec     pinRecord
	log     *slog.Logger

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
	return s.collector.pin(v)
}

// pin is Pin, once the store is known to be open.
func (c *collector) pin(v uint64) (*Pin, error) { return c.pins.pin(v) }

// pinSet is the store's readers' pins: the RecordPin records of its backend.
type pinSet struct {
	be  *backendCaps
	log *slog.Logger
}

// pin writes a pin record for version v and renews it until the Pin's Close.
func (ps *pinSet) pin(v uint64) (*Pin, error) {
	if ps.be.records == nil {
		return nil, fmt.Errorf("pin version %d: %w", v, ErrPinUnsupported)
	}
	var token [16]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, fmt.Errorf("pin version %d: %w", v, err)
	}
	host, _ := os.Hostname()
	p := &Pin{records: ps.be.records, name: hex.EncodeToString(token[:]) + ".json", log: ps.log,
		rec:  pinRecord{Format: pinFormat, Version: v, Host: host, PID: os.Getpid()},
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := p.write(time.Now()); errors.Is(err, errors.ErrUnsupported) {
		return nil, fmt.Errorf("pin version %d: %w", v, ErrPinUnsupported)
	} else if err != nil {
		return nil, fmt.Errorf("pin version %d: %w", v, err)
	}
	go p.renewLoop()
	return p, nil
}

// Version is the pinned version.
func (p *Pin) Version() uint64 { return p.rec.Version }

// Path is the pin record's file.
func (p *Pin) Path() string { return p.records.RecordPath(RecordPin, p.name) }

// write replaces the record atomically, so that gc never reads half a record.
func (p *Pin) write(now time.Time) error {
	rec := p.rec
	rec.Expires = now.Add(PinLease).UTC().Truncate(time.Second)
	data, err := format.EncodePin(rec)
	if err != nil {
		return err
	}
	return p.records.PutRecord(RecordPin, p.name, data)
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
		if rerr := p.records.DeleteRecord(RecordPin, p.name); rerr != nil {
			err = fmt.Errorf("remove pin of version %d: %w", p.rec.Version, rerr)
		}
	})
	return err
}

// PinInfo describes a pin record.
type PinInfo struct {
	Name    string // the record's file name
	Version uint64
	Expires time.Time
	Owner   string // "host pid N"
}

// list reads every pin record. An unreadable record (or one of an unknown format) is an
// error: what it protects is unknown, and gc must not guess.
func (ps *pinSet) list() ([]PinInfo, error) {
	recs := ps.be.records
	if recs == nil {
		return nil, nil
	}
	names, err := recs.ListRecords(RecordPin)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pins: %w", err)
	}
	var out []PinInfo
	for _, name := range names {
		data, err := recs.GetRecord(RecordPin, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // its reader just removed it
		}
		if errors.Is(err, errNotRegular) {
			// Not read: reading a FIFO would block gc until a writer came.
			return nil, fmt.Errorf("%w (remove it if no reader uses it)", err)
		}
		if err != nil {
			return nil, fmt.Errorf("pins: %w", err)
		}
		rec, err := decodePin(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (remove it if no reader uses it)", recs.RecordPath(RecordPin, name), err)
		}
		out = append(out, PinInfo{Name: name, Version: rec.Version, Expires: rec.Expires,
			Owner: fmt.Sprintf("%s pid %d", rec.Host, rec.PID)})
	}
	return out, nil
}

// active is the set of versions named by a pin that has not expired at now.
func (ps *pinSet) active(now time.Time) (map[uint64]bool, error) {
	pins, err := ps.list()
	if err != nil {
		return nil, err
	}
	out := map[uint64]bool{}
	for _, p := range pins {
		if p.Expires.After(now) {
			out[p.Version] = true
		}
	}
	return out, nil
}

// removeExpired deletes the records of readers that went away without removing theirs
// (expired for a whole lease more, so that a reader whose renewals were late is not
// surprised).
func (ps *pinSet) removeExpired(now time.Time) {
	pins, err := ps.list()
	if err != nil {
		return
	}
	for _, p := range pins {
		if p.Expires.Add(PinLease).Before(now) {
			if err := ps.be.records.DeleteRecord(RecordPin, p.Name); err == nil {
				ps.log.Info("gc: removed an expired pin", "version", p.Version, "owner", p.Owner, "expired", p.Expires.Format(time.RFC3339))
			}
		}
	}
}
