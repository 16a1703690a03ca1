package store

import (
	"context"
	"fmt"
	"log/slog"
)

// The store logs through Options.Logger with these levels (docs/operations.md, "Logs"):
// debug for what happens per file (a file stored whole or opaque), info for what happens to
// the store (versions dropped by gc or retention, a quarantine, a rebuilt copy), warn for
// damage met, retries and clean-ups that failed (the store goes on), error for what it cannot
// work around (an index it cannot recreate, a writer's copy it cannot build). The lines of
// the S3 client, its lease and its credential chain come through logfAt, all at warn.

// newLogger is l, or a logger that discards everything when l is nil.
func newLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// logfAt adapts l to the printf-style hooks of the S3 client, its lease and its credential
// chain: each line is one record at level.
func logfAt(l *slog.Logger, level slog.Level) func(string, ...any) {
	l = newLogger(l)
	return func(format string, args ...any) {
		if l.Enabled(context.Background(), level) {
			l.Log(context.Background(), level, fmt.Sprintf(format, args...))
		}
	}
}
