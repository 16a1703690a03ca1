package s3

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/store"
)

func validLeaseJSON(t testing.TB, edit func(*leaseRecord)) []byte {
	t0 := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	rec := leaseRecord{Format: leaseFormat, Token: strings.Repeat("ab", 16), Owner: "node1 pid 7",
		Acquired: t0, Renewed: t0.Add(time.Minute), Expires: t0.Add(time.Minute + 30*time.Second)}
	if edit != nil {
		edit(&rec)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeLease(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		ok   bool
		want error
	}{
		{"valid", validLeaseJSON(t, nil), true, nil},
		{"other format", validLeaseJSON(t, func(r *leaseRecord) { r.Format = "weightfs-lease-2" }), false, store.ErrUnsupportedVersion},
		{"short token", validLeaseJSON(t, func(r *leaseRecord) { r.Token = "abc" }), false, nil},
		{"token not hex", validLeaseJSON(t, func(r *leaseRecord) { r.Token = strings.Repeat("zz", 16) }), false, nil},
		{"expires before renewed", validLeaseJSON(t, func(r *leaseRecord) { r.Expires = r.Renewed.Add(-time.Second) }), false, nil},
		{"renewed before acquired", validLeaseJSON(t, func(r *leaseRecord) { r.Renewed = r.Acquired.Add(-time.Second) }), false, nil},
		{"unknown field", []byte(`{"format":"weightfs-lease-1","extra":1}`), false, nil},
		{"trailing data", append(validLeaseJSON(t, nil), []byte(` {}`)...), false, nil},
		{"not JSON", []byte("lock"), false, nil},
		{"empty", nil, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := decodeLease(tt.in)
			if tt.ok {
				if err != nil || rec.Owner != "node1 pid 7" {
					t.Fatalf("decode: %+v, %v", rec, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("decode accepted %q", tt.in)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("decode: %v, want %v", err, tt.want)
			}
		})
	}
}

func FuzzDecodeLease(f *testing.F) {
	f.Add(validLeaseJSON(f, nil))
	f.Add([]byte(`{"format":"weightfs-lease-1"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeLease(b)
		if err != nil {
			return
		}
		// What decodes is well formed, and encodes to something that decodes the same.
		again, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		rec2, err := decodeLease(again)
		if err != nil || rec2.Token != rec.Token || !rec2.Expires.Equal(rec.Expires) {
			t.Fatalf("round trip of %q: %+v, %v", b, rec2, err)
		}
	})
}

// leaseClient is an S3 client of the store at url on srv, with a lease TTL of ttl.
func leaseClient(t *testing.T, srv *s3test.Server, url string, ttl time.Duration) *client {
	t.Helper()
	srv.SetEnv(t)
	c, err := setup(url, Config{LeaseTTL: ttl, RetryFor: time.Second}, logtest.New(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.makeBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLeaseOneWriter: a live lease refuses a second writer by name; an expired one is taken
// over, and its old holder then finds it lost and may not write a manifest; a released one
// is free at once.
func TestLeaseOneWriter(t *testing.T) {
	srv := s3test.Start(t)
	c := leaseClient(t, srv, testURL(t), 30*time.Second)
	ctx := context.Background()
	a, err := acquireLease(ctx, c, logtest.New(t.Logf), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer a.release()
	if _, err := acquireLease(ctx, c, logtest.New(t.Logf), time.Now); !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), a.rec.Owner) {
		t.Fatalf("second writer: %v, want store.ErrLocked naming %q", err, a.rec.Owner)
	}
	if err := a.ensure(ctx, true); err != nil {
		t.Fatalf("holder's renewal: %v", err)
	}
	// Another writer whose clock is past the expiry takes the lease over.
	later := func() time.Time { return time.Now().Add(time.Minute) }
	b, err := acquireLease(ctx, c, logtest.New(t.Logf), later)
	if err != nil {
		t.Fatalf("take over an expired lease: %v", err)
	}
	if err := a.ensure(ctx, true); !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("old holder after a takeover: %v, want a lost lease", err)
	}
	if err := a.ensure(ctx, false); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("old holder stays refused: %v", err)
	}
	if err := b.ensure(ctx, true); err != nil {
		t.Fatalf("new holder: %v", err)
	}
	if err := b.release(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readLease(ctx, c); err == nil {
		t.Fatal("lease still there after release")
	}
	d, err := acquireLease(ctx, c, logtest.New(t.Logf), time.Now)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	d.release()
}

// TestLeaseBreak: breaking the lease frees the store, and the writer that held it can no
// longer seal a version.
func TestLeaseBreak(t *testing.T) {
	_, url := startInitialized(t)
	w := openTestStore(t, url, store.Options{})
	commitTree(t, w, 1, newTestModel(9, 1000).files(t))
	info, err := BreakLease(url, Config{}, nil)
	if err != nil || !info.Held || info.Token == "" {
		t.Fatalf("break: %+v, %v", info, err)
	}
	w2 := openTestStore(t, url, store.Options{})
	m := newTestModel(9, 1000)
	m.step()
	dir := writeTree(t, t.TempDir(), m.files(t))
	if _, err := w.Commit(dir, store.CommitOptions{Version: 2}); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("commit by the writer whose lease was broken: %v, want store.ErrLocked", err)
	}
	if _, err := w2.Commit(dir, store.CommitOptions{Version: 2}); err != nil {
		t.Fatalf("commit by the new writer: %v", err)
	}
	if _, err := BreakLease(t.TempDir(), Config{}, nil); err == nil {
		t.Fatal("breaking a local store's lock succeeded")
	}
}
