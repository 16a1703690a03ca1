package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

func TestClassify(t *testing.T) {
	resp := func(status int, code string) error { return minio.ErrorResponse{StatusCode: status, Code: code} }
	tests := []struct {
		name string
		err  error
		want errClass
	}{
		{"nil", nil, classOK},
		{"no such key", resp(404, "NoSuchKey"), classNotFound},
		{"bare 404", resp(404, ""), classNotFound},
		{"precondition", resp(412, "PreconditionFailed"), classPrecondition},
		{"conditional conflict", resp(409, "ConditionalRequestConflict"), classTransient},
		{"slow down", resp(503, "SlowDown"), classTransient},
		{"internal", resp(500, "InternalError"), classTransient},
		{"bad gateway", resp(502, ""), classTransient},
		{"too many requests", resp(429, ""), classTransient},
		{"access denied", resp(403, "AccessDenied"), classPermanent},
		{"bad signature", resp(403, "SignatureDoesNotMatch"), classPermanent},
		{"bad request", resp(400, "InvalidArgument"), classPermanent},
		{"wrapped 404", fmt.Errorf("get: %w", resp(404, "NoSuchKey")), classNotFound},
		{"connection refused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, classTransient},
		{"body cut short", io.ErrUnexpectedEOF, classTransient},
		{"canceled", context.Canceled, classPermanent},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("%s: class %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestBackoffGrowsAndStaysBounded(t *testing.T) {
	for attempt := 0; attempt < 12; attempt++ {
		full := 2 * time.Second
		if attempt < 5 {
			full = 100 * time.Millisecond << attempt
		}
		for range 50 {
			if d := backoff(attempt); d < full/2 || d > full {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", attempt, d, full/2, full)
			}
		}
	}
}

func TestParseContentRangeTotal(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"bytes 0-99/12345", 12345, true},
		{"bytes 0-0/1", 1, true},
		{"bytes */0", 0, true},
		{"bytes 0-99/*", 0, false},
		{"items 0-9/10", 0, false},
		{"bytes 0-99", 0, false},
		{"bytes 0-99/-5", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := parseContentRangeTotal(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseContentRangeTotal(%q) = %d, %v", tt.in, got, err)
		}
	}
}

func FuzzParseContentRangeTotal(f *testing.F) {
	f.Add("bytes 0-99/12345")
	f.Add("bytes */0")
	f.Add("bytes 1-2/")
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseContentRangeTotal(s)
		if err == nil && n < 0 {
			t.Fatalf("%q: negative total %d", s, n)
		}
	})
}

// testRetryClient is a client with no server, for the retry loop alone.
func testRetryClient(retryFor time.Duration) (*client, *int) {
	slept := new(int)
	c := &client{loc: Location{"bucket", "p"}, set: settings{retryFor: retryFor, host: "h"}, stats: &counters{},
		log: slog.New(slog.DiscardHandler)}
	c.sleep = func(ctx context.Context, d time.Duration) error { *slept++; return ctx.Err() }
	return c, slept
}

func TestRetry(t *testing.T) {
	transient := minio.ErrorResponse{StatusCode: 503, Code: "SlowDown", Message: "slow down"}
	t.Run("transient then success", func(t *testing.T) {
		c, slept := testRetryClient(time.Minute)
		calls := 0
		err := c.retry(context.Background(), "GET x", func(context.Context) error {
			calls++
			if calls < 3 {
				return transient
			}
			return nil
		})
		if err != nil || calls != 3 || *slept != 2 || c.stats.retries != 2 {
			t.Fatalf("err %v after %d calls, %d sleeps, %d retries counted", err, calls, *slept, c.stats.retries)
		}
	})
	t.Run("permanent is not retried", func(t *testing.T) {
		c, slept := testRetryClient(time.Minute)
		calls := 0
		err := c.retry(context.Background(), "GET x", func(context.Context) error {
			calls++
			return minio.ErrorResponse{StatusCode: 403, Code: "AccessDenied", Message: "denied"}
		})
		var errno syscall.Errno
		if err == nil || calls != 1 || *slept != 0 || errors.As(err, &errno) {
			t.Fatalf("err %v after %d calls, %d sleeps", err, calls, *slept)
		}
	})
	t.Run("not found unwraps to ErrNotExist", func(t *testing.T) {
		c, _ := testRetryClient(time.Minute)
		err := c.retry(context.Background(), "GET x", func(context.Context) error {
			return minio.ErrorResponse{StatusCode: 404, Code: "NoSuchKey"}
		})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("gives up and hides the errno", func(t *testing.T) {
		c, slept := testRetryClient(time.Nanosecond)
		refused := &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
		err := c.retry(context.Background(), "GET x", func(context.Context) error { return refused })
		var errno syscall.Errno
		if err == nil || errors.As(err, &errno) || c.stats.failures != 1 || *slept > 1 {
			t.Fatalf("err %v (%d sleeps, %d failures): want a failure without errno", err, *slept, c.stats.failures)
		}
	})
	t.Run("local errors pass unchanged", func(t *testing.T) {
		c, slept := testRetryClient(time.Minute)
		err := c.retry(context.Background(), "GET x", func(context.Context) error {
			return &localError{fmt.Errorf("write: %w", syscall.ENOSPC)}
		})
		if !errors.Is(err, syscall.ENOSPC) || *slept != 0 {
			t.Fatalf("err %v after %d sleeps, want ENOSPC at once", err, *slept)
		}
	})
}
