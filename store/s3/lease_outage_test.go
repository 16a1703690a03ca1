package s3

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/store"
)

// testClock is a clock a test moves; with step set, every reading moves it by step (each
// renewal then takes that long, between its send time and the check of what is left).
type testClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *testClock) setStep(d time.Duration) {
	c.mu.Lock()
	c.step = d
	c.mu.Unlock()
}

// TestLeaseOutageIsNotLocked: a writer whose lease cannot be renewed because the bucket does
// not answer (the connection cut), or answers too late (the renewal landed, but the lease's
// time was mostly spent meanwhile), is refused writes with ErrLeaseNotRenewed, an error that
// says so and carries the cause, never with ErrLocked ("locked by another writer": nobody
// else holds it); the lease is not given up, and once the bucket answers again the writer
// goes on.
func TestLeaseOutageIsNotLocked(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	proxy := startFlakyProxy(t, srv.Addr)
	ttl := 30 * time.Second
	c, err := setup(testURL(t), Config{Endpoint: "http://" + proxy.addr(), LeaseTTL: ttl, RetryFor: 200 * time.Millisecond}, logtest.New(t.Logf))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.makeBucket(ctx); err != nil {
		t.Fatal(err)
	}
	clock := &testClock{t: time.Now()}
	l, err := acquireLease(ctx, c, logtest.New(t.Logf), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()

	notLocked := func(what string, err error, says ...string) {
		t.Helper()
		if err == nil || errors.Is(err, store.ErrLocked) || !errors.Is(err, store.ErrLeaseNotRenewed) {
			t.Fatalf("%s: %v, want ErrLeaseNotRenewed and not ErrLocked", what, err)
		}
		t.Logf("%s: %v", what, err)
		for _, s := range append([]string{"could not be renewed", "writes stop"}, says...) {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("%s: %q does not say %q", what, err, s)
			}
		}
	}

	// The bucket away: past half the TTL, writes are refused, saying why.
	proxy.setDown(true)
	clock.add(ttl/2 + time.Second)
	notLocked("ensure while the bucket is away", l.ensure(ctx, false), "did not answer")
	notLocked("a strict ensure while the bucket is away", l.ensure(ctx, true), "did not answer")

	// The bucket back, but the renewal answers late: the lease it wrote is mostly spent.
	proxy.setDown(false)
	clock.setStep(ttl/2 + time.Second)
	notLocked("a renewal that landed too late", l.ensure(ctx, true), "too late")
	clock.setStep(0)

	// The bucket answers in time again: the writer goes on with the lease it held.
	if err := l.ensure(ctx, true); err != nil {
		t.Fatalf("ensure once the bucket answers: %v", err)
	}
	cur, _, err := readLease(ctx, c)
	if err != nil || cur.Token != l.rec.Token {
		t.Fatalf("the lease after the outage: %+v, %v (want ours, %s)", cur, err, l.rec.Token)
	}
}
