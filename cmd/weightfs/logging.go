package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

// logSettings say where a command's log lines go and which: --log-level, --log-format and
// --log-file, which every command takes (newFlags adds them), -o log_level=, log_format=,
// log_file= for mount, and mount's --debug (debug level, and FUSE request tracing).
type logSettings struct {
	level, format, file string
	debug               bool
}

// The log flags' names; logSettingsOf reads them back from a parsed flag set.
const (
	flagLogLevel  = "log-level"
	flagLogFormat = "log-format"
	flagLogFile   = "log-file"
)

func addLogFlags(fs *flag.FlagSet) {
	fs.String(flagLogLevel, "info", "log lines at this level and above: debug (adds one line per file and per request), info, warn or error")
	fs.String(flagLogFormat, "text", "log line format: text (time=… level=… msg=… key=value) or json (one object per line)")
	fs.String(flagLogFile, "", "append log lines to `FILE` instead of stderr (reopened on SIGUSR1, for logrotate)")
}

// logSettingsOf reads the log flags (and --debug, if the command has it) of a parsed set.
func logSettingsOf(fs *flag.FlagSet) logSettings {
	get := func(name string) string {
		if f := fs.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	return logSettings{level: get(flagLogLevel), format: get(flagLogFormat), file: get(flagLogFile), debug: get("debug") == "true"}
}

// parseLogLevel reads a level name, case-insensitively.
func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
}

// startLog points e.log where ls says, replacing (and closing) what an earlier call set up.
// A bad level or format is a usage error; a log file that cannot be opened, a failure.
func (e *env) startLog(ls logSettings) error {
	level, err := parseLogLevel(ls.level)
	if err != nil {
		return usagef("%v", err)
	}
	if ls.debug {
		level = slog.LevelDebug
	}
	newHandler := func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewTextHandler(w, o) }
	switch strings.ToLower(ls.format) {
	case "text", "":
	case "json":
		newHandler = func(w io.Writer, o *slog.HandlerOptions) slog.Handler { return slog.NewJSONHandler(w, o) }
	default:
		return usagef("log format %q: want text or json", ls.format)
	}
	var w io.Writer = e.stderr
	var lf *logFile
	if ls.file != "" {
		if lf, err = openLogFile(ls.file); err != nil {
			return err
		}
		w = lf
	}
	e.closeLog()
	e.log = slog.New(newHandler(w, &slog.HandlerOptions{Level: level}))
	e.logFile = lf
	return nil
}

// closeLog closes the log file, if any; later lines go to stderr at the default settings.
func (e *env) closeLog() {
	if e.logFile == nil {
		return
	}
	e.logFile.Close()
	e.logFile = nil
	e.log = slog.New(slog.NewTextHandler(e.stderr, nil))
}

// logFile is a log file opened for appending. SIGUSR1 reopens it by name, so that logrotate
// can move the file away and signal the daemon (SIGHUP would unmount: see cmd_mount.go);
// appending also makes logrotate's copytruncate safe without a signal.
type logFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
	sigs chan os.Signal
	done chan struct{}
}

func openLogFile(path string) (*logFile, error) {
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	l := &logFile{path: path, f: f, sigs: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(l.sigs, syscall.SIGUSR1)
	go func() {
		for {
			select {
			case <-l.done:
				return
			case <-l.sigs:
				l.reopen()
			}
		}
	}()
	return l, nil
}

func openAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	return f, nil
}

// reopen opens the path again; if that fails, lines go on to the old file, and the failure is
// the first line there.
func (l *logFile) reopen() {
	f, err := openAppend(l.path)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		fmt.Fprintf(l.f, "weightfs: reopen %v; still writing here\n", err)
		return
	}
	l.f.Close()
	l.f = f
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

func (l *logFile) Close() {
	signal.Stop(l.sigs)
	close(l.done)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Close()
}
