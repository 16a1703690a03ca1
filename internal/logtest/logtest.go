// Package logtest adapts a printf-style function (testing.T.Logf, or a test's collector) to
// the *slog.Logger that the store and the mount log through, so that tests can read what was
// logged as plain lines.
package logtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// New returns a logger that passes every record, at every level, to logf as one line:
// "LEVEL message key=value ...", with group names joined by dots.
func New(logf func(format string, args ...any)) *slog.Logger {
	return slog.New(&handler{logf: logf, mu: new(sync.Mutex)})
}

type handler struct {
	logf   func(string, ...any)
	mu     *sync.Mutex // serializes logf: collectors append to a slice
	attrs  string      // pre-rendered attributes of With
	prefix string      // open groups, "a.b."
}

func (h *handler) Enabled(context.Context, slog.Level) bool { return true }

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String())
	b.WriteByte(' ')
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.prefix, a)
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.logf("%s", b.String())
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	for _, a := range as {
		writeAttr(&b, h.prefix, a)
	}
	c := *h
	c.attrs += b.String()
	return &c
}

func (h *handler) WithGroup(name string) slog.Handler {
	c := *h
	c.prefix += name + "."
	return &c
}

func writeAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			writeAttr(b, prefix+a.Key+".", g)
		}
		return
	}
	fmt.Fprintf(b, " %s%s=%v", prefix, a.Key, a.Value.Any())
}
