package s3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/weightfs/weightfs/internal/jsonrecord"
	"github.com/weightfs/weightfs/store"
)

// The writer's lease on an S3 store is the object PREFIX/lock, a small JSON record (below).
// S3 has no locks, but it has conditional writes, and the lease is built on them alone:
//
//   - acquire: read the lease; a live one (expires in the future) refuses with ErrLocked and
//     names its holder. An absent one is created with If-None-Match: * (only one of two
//     writers racing creates it); an expired one is replaced with If-Match: <its ETag> (only
//     one of two writers racing replaces it). Then the lease is read back: only a record with
//     our token means we hold it.
//   - renew: every TTL/3 the record is rewritten with If-Match: <the ETag of our last write>.
//     If that condition fails, someone broke or took the lease: it is lost for good, and the
//     writer can no longer seal (ErrLocked). If S3 is unreachable (or answers too late) the
//     writer's writes are refused with ErrLeaseNotRenewed, not ErrLocked: nobody else is
//     known to hold the lease, and the renewal is retried; once it works again and nobody
//     took the lease meanwhile, the writer goes on.
//   - fence: a manifest is written only right after a successful renewal (which, being
//     conditional, proves nobody broke or took the lease), gc deletes only while the lease is
//     valid for at least TTL/2 more, and manifests are created with If-None-Match: * so a
//     version is never overwritten, by anyone.
//   - release: on Close the lease is deleted (if it still holds our token).
//
// Expiry compares the record's time with the local clock, so the writers' clocks must agree
// to well within the TTL (NTP). The window that remains: a writer that stops for longer than
// the TTL between its renewal and its manifest PUT (a frozen VM, say) may publish a version
// after another writer took over; see docs/s3.md.

// leaseFormat names the lease record's layout; other values are refused, not guessed.
const leaseFormat = "weightfs-lease-1"

// leaseKey is the lease object's path in the store.
const leaseKey = "lock"

// leaseRecord is the JSON content of the lease object.
type leaseRecord struct {
	Format   string    `json:"format"`
	Token    string    `json:"token"` // 32 hex digits, random per acquisition
	Owner    string    `json:"owner"` // "host pid N", for people
	Acquired time.Time `json:"acquired"`
	Renewed  time.Time `json:"renewed"`
	Expires  time.Time `json:"expires"`
}

// decodeLease parses and checks a lease record.
func decodeLease(b []byte) (leaseRecord, error) {
	var rec leaseRecord
	if err := jsonrecord.Decode(b, &rec, "lease record"); err != nil {
		return leaseRecord{}, err
	}
	if rec.Format != leaseFormat {
		return leaseRecord{}, fmt.Errorf("lease record of format %q (this program reads %q): %w", rec.Format, leaseFormat, store.ErrUnsupportedVersion)
	}
	if len(rec.Token) != 32 {
		return leaseRecord{}, fmt.Errorf("lease record: token %q is not 32 hex digits", rec.Token)
	}
	if _, err := hex.DecodeString(rec.Token); err != nil {
		return leaseRecord{}, fmt.Errorf("lease record: token %q is not 32 hex digits", rec.Token)
	}
	if rec.Expires.Before(rec.Renewed) || rec.Renewed.Before(rec.Acquired) {
		return leaseRecord{}, errors.New("lease record: times out of order (acquired <= renewed <= expires)")
	}
	return rec, nil
}

// LeaseInfo describes the writer's lease of a store, for `weightfs lease`.
type LeaseInfo struct {
	Held     bool // a lease record exists (live or expired)
	Expired  bool // it expired: the next writer takes it over without asking
	Owner    string
	Token    string
	Acquired time.Time
	Renewed  time.Time
	Expires  time.Time
}

func (r leaseRecord) info(now time.Time) LeaseInfo {
	return LeaseInfo{Held: true, Expired: !now.Before(r.Expires), Owner: r.Owner, Token: r.Token,
		Acquired: r.Acquired, Renewed: r.Renewed, Expires: r.Expires}
}

// lease is a held lease, renewed in the background until release.
type lease struct {
	c   *client
	key string
	ttl time.Duration
	log *slog.Logger
	now func() time.Time

	renewMu    sync.Mutex // one write of the record at a time
	mu         sync.Mutex
	rec        leaseRecord
	etag       string    // of our last write
	validUntil time.Time // the send time of our last successful write + TTL
	lost       error
	released   bool

	stop chan struct{}
	done chan struct{}
}

// readLease returns the current lease record and its ETag (fs.ErrNotExist: none).
func readLease(ctx context.Context, c *client) (leaseRecord, string, error) {
	data, etag, err := c.getBytes(ctx, c.loc.key(leaseKey), nil)
	if err != nil {
		return leaseRecord{}, "", err
	}
	rec, err := decodeLease(data)
	if err != nil {
		return leaseRecord{}, "", fmt.Errorf("%s: %w (%w)", c.name(c.loc.key(leaseKey)), err, errBadLease)
	}
	return rec, etag, nil
}

// errBadLease marks a lease object that is there but is no lease record this program reads.
var errBadLease = errors.New("not a lease record")

// notRenewed is the error of a writer whose lease could not be renewed (why: the bucket did
// not answer, or too late): its writes stop, to stay safe, until a renewal succeeds. Not
// ErrLocked: nobody else is known to hold the lease.
func (l *lease) notRenewed(why string, cause error) error {
	msg := fmt.Sprintf("the writer lease of %s could not be renewed: %s; writes stop until a renewal succeeds, to stay safe (no other writer is known to hold it; this writer retries every %s)",
		l.c.loc, why, (l.ttl / 3).Round(time.Millisecond))
	if cause != nil {
		return fmt.Errorf("%s: %w (%w)", msg, store.ErrLeaseNotRenewed, cause)
	}
	return fmt.Errorf("%s: %w", msg, store.ErrLeaseNotRenewed)
}

// lockedError is the error of a second writer.
func lockedError(c *client, rec leaseRecord) error {
	return fmt.Errorf("%s is held by %s (acquired %s, renewed %s, expires %s unless renewed); if that writer is dead, wait for the expiry or run 'weightfs lease break %s': %w",
		c.describe(), rec.Owner, rec.Acquired.Format(time.RFC3339), rec.Renewed.Format(time.RFC3339),
		rec.Expires.Format(time.RFC3339), c.loc, store.ErrLocked)
}

// acquireLease takes the writer's lease of the store or fails with ErrLocked. now is the
// clock (time.Now; tests move it).
func acquireLease(ctx context.Context, c *client, log *slog.Logger, now func() time.Time) (*lease, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, fmt.Errorf("lease token: %w", err)
	}
	host, _ := os.Hostname()
	l := &lease{c: c, key: c.loc.key(leaseKey), ttl: c.set.leaseTTL, log: log, now: now}
	l.rec = leaseRecord{Format: leaseFormat, Token: hex.EncodeToString(tok[:]),
		Owner: fmt.Sprintf("%s pid %d", host, os.Getpid()), Acquired: l.now().UTC()}
	for range 5 {
		cur, etag, err := readLease(ctx, c)
		switch {
		case err == nil && cur.Token == l.rec.Token:
			// Our own write landed though its answer was lost.
			return l.start(etag, cur.Renewed), nil
		case err == nil && l.now().Before(cur.Expires):
			return nil, lockedError(c, cur)
		case err == nil:
			sent := l.now()
			_, werr := l.write(ctx, putCond{ifMatch: etag}, sent)
			if isPrecondition(werr) || errors.Is(werr, fs.ErrNotExist) {
				continue // another writer moved first: look again
			}
			if werr != nil {
				return nil, fmt.Errorf("take over the expired lease of %s: %w", c.loc, werr)
			}
			log.Warn(fmt.Sprintf("s3: took over the writer lease of %s from %s, expired %s ago", c.loc, cur.Owner, sent.Sub(cur.Expires).Round(time.Second)))
		case errors.Is(err, fs.ErrNotExist):
			_, werr := l.write(ctx, putCond{ifNoneMatch: true}, l.now())
			if isPrecondition(werr) {
				continue
			}
			if werr != nil {
				return nil, fmt.Errorf("create the writer lease of %s: %w", c.loc, werr)
			}
		default:
			return nil, fmt.Errorf("read the writer lease of %s: %w (if the lease object is damaged, run 'weightfs lease break %s')", c.loc, err, c.loc)
		}
		// Read back: a server that ignored the condition must not give two writers the lease.
		back, etag, err := readLease(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("read back the writer lease of %s: %w", c.loc, err)
		}
		if back.Token != l.rec.Token {
			return nil, lockedError(c, back)
		}
		return l.start(etag, back.Renewed), nil
	}
	return nil, fmt.Errorf("%s: the writer lease changed hands five times while we tried to take it: %w", c.loc, store.ErrLocked)
}

// write stores our record, renewed at sent, under cond, and returns the new ETag.
func (l *lease) write(ctx context.Context, cond putCond, sent time.Time) (string, error) {
	l.mu.Lock()
	rec := l.rec
	l.mu.Unlock()
	rec.Renewed = sent.UTC()
	rec.Expires = rec.Renewed.Add(l.ttl)
	data, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	return l.c.putBytes(ctx, l.key, data, cond)
}

// start records a successful acquisition and starts the renewals.
func (l *lease) start(etag string, renewed time.Time) *lease {
	l.etag = etag
	l.validUntil = renewed.Add(l.ttl)
	l.stop = make(chan struct{})
	l.done = make(chan struct{})
	go l.renewLoop()
	return l
}

func (l *lease) renewLoop() {
	defer close(l.done)
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-l.stop
		cancel()
	}()
	failing := false
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		err := l.renew(ctx)
		if err != nil && errors.Is(err, store.ErrLocked) {
			return // lost for good; renew logged it
		}
		// Said once per outage: writes are refused meanwhile, with the same reason.
		if err != nil && !failing {
			l.log.Warn(fmt.Sprintf("s3: %v", err))
		} else if err == nil && failing {
			l.log.Info(fmt.Sprintf("s3: the writer lease of %s is renewed again", l.c.loc))
		}
		failing = err != nil
	}
}

// renew rewrites the record conditioned on our last ETag.
func (l *lease) renew(ctx context.Context) error {
	l.renewMu.Lock()
	defer l.renewMu.Unlock()
	l.mu.Lock()
	etag, lost := l.etag, l.lost
	l.mu.Unlock()
	if lost != nil {
		return lost
	}
	sent := l.now()
	newTag, err := l.write(ctx, putCond{ifMatch: etag}, sent)
	if isPrecondition(err) || errors.Is(err, fs.ErrNotExist) {
		// Our previous renewal may have landed with its answer lost: then the record is ours.
		cur, curTag, rerr := readLease(ctx, l.c)
		if rerr == nil && cur.Token == l.rec.Token {
			l.mu.Lock()
			l.etag, l.validUntil = curTag, cur.Renewed.Add(l.ttl)
			l.mu.Unlock()
			return nil
		}
		holder := "nobody (the lease was broken)"
		switch {
		case rerr == nil:
			holder = cur.Owner
		case errors.Is(rerr, errBadLease):
			holder = "nobody this program knows (the lease object was overwritten)"
		case !errors.Is(rerr, fs.ErrNotExist):
			// Refused, then no answer: whether the lease is still ours is unknown.
			return l.notRenewed("the bucket refused the renewal and then did not answer whether the lease is still ours", rerr)
		}
		l.mu.Lock()
		l.lost = fmt.Errorf("the writer lease of %s was lost: %s holds it now; this writer can no longer seal versions: %w", l.c.loc, holder, store.ErrLocked)
		l.mu.Unlock()
		l.log.Error(fmt.Sprintf("s3: %v", l.lost))
		return l.lost
	}
	if err != nil {
		return l.notRenewed("the bucket did not answer", err)
	}
	l.mu.Lock()
	l.etag, l.validUntil = newTag, sent.Add(l.ttl)
	l.mu.Unlock()
	return nil
}

// ensure returns nil when the lease is valid for at least TTL/2 more, renewing it first if
// needed (always, with strict: a renewal is a conditional write, so it also proves that
// nobody broke or took the lease since the last one); else why not.
func (l *lease) ensure(ctx context.Context, strict bool) error {
	l.mu.Lock()
	lost, left := l.lost, l.validUntil.Sub(l.now())
	l.mu.Unlock()
	if lost != nil {
		return lost
	}
	if left >= l.ttl/2 && !strict {
		return nil
	}
	// A renewal that was answered late (the bucket slow, its retries) leaves the lease mostly
	// spent: one more, which a bucket that answers again answers at once.
	var took time.Duration
	for range 2 {
		start := l.now()
		if err := l.renew(ctx); err != nil {
			return err
		}
		l.mu.Lock()
		now := l.now()
		left = l.validUntil.Sub(now)
		l.mu.Unlock()
		if left >= l.ttl/2 {
			return nil
		}
		took = now.Sub(start)
	}
	return l.notRenewed(fmt.Sprintf("the bucket answered too late (a renewal took %s, the lease lasts %s; at least half of it must be left to write)",
		took.Round(time.Millisecond), l.ttl), nil)
}

// release stops the renewals and deletes the lease if it still holds our token. (Between the
// read and the delete another writer could only have taken an expired lease; deleting theirs
// then costs them their next renewal, which they report as a lost lease.)
func (l *lease) release() error {
	if l == nil || l.stop == nil {
		return nil
	}
	l.mu.Lock()
	lost, released := l.lost, l.released
	l.released = true
	l.mu.Unlock()
	if released {
		return nil
	}
	close(l.stop)
	<-l.done
	if lost != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.c.set.retryFor)
	defer cancel()
	cur, _, err := readLease(ctx, l.c)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release the writer lease of %s: %w", l.c.loc, err)
	}
	if cur.Token != l.rec.Token {
		return nil
	}
	if err := l.c.remove(ctx, l.key); err != nil {
		return fmt.Errorf("release the writer lease of %s: %w", l.c.loc, err)
	}
	return nil
}
