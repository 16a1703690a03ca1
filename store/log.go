package store

import (
	"log/slog"
)

// The store logs through Options.Logger with these levels (docs/operations.md, "Logs"):
// debug for what happens per file (a file stored whole or opaque), info for what happens to
// the store (versions dropped by gc or retention, a quarantine, a rebuilt copy), warn for
// damage met, retries and clean-ups that failed (the store goes on), error for what it cannot
// work around (an index it cannot recreate, a writer's copy it cannot build). store/s3 logs
// through the same logger: retries at warn, a lost lease at error, credentials at debug.

// newLogger is l, or a logger that discards everything when l is nil.
func newLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
