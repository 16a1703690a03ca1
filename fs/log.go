package fs

import (
	"log"
	"log/slog"
)

// orDiscard is l, or a logger that discards everything when l is nil.
func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// fuseLogger is the log.Logger go-fuse's server writes to. With Options.Debug that is the
// request trace, one line per request and reply: debug level. Without it go-fuse writes only
// what went wrong in the protocol: a warning.
func fuseLogger(l *slog.Logger, debug bool) *log.Logger {
	level := slog.LevelWarn
	if debug {
		level = slog.LevelDebug
	}
	return slog.NewLogLogger(l.With("component", "fuse").Handler(), level)
}
