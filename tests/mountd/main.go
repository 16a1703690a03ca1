// Command mountd is the end-to-end tests' stand-in for `weightfs mount` when cmd/weightfs does
// not build: it opens a store and serves it with fs.Mount until SIGINT/SIGTERM/SIGHUP (retried
// while the mount is busy) or an external unmount. Its flags are those of `weightfs mount`.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	wfs "github.com/weightfs/weightfs/fs"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "mountd: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	readOnly := flag.Bool("read-only", false, "serve sealed versions only")
	version := flag.String("version", "", "with --read-only: serve this version (a number or 'latest') at the mount root")
	cacheDir := flag.String("cache-dir", "", "this process's cache directory")
	poll := flag.Duration("poll", 500*time.Millisecond, "with --read-only: poll interval")
	debug := flag.Bool("debug", false, "trace FUSE requests")
	allowOther := flag.Bool("allow-other", false, "let other users use the mount (with default_permissions)")
	allowNonEmpty := flag.Bool("allow-non-empty", false, "mount over a directory that holds files")
	keepLast := flag.Int("keep-last", 0, "read-write: gc after each seal keeping the newest N versions")
	keepEvery := flag.Int("keep-every", 0, "with --keep-last: also keep the multiples of K")
	keepExact := flag.Bool("keep-exact", false, "with --keep-last: drop down to exactly N whatever re-anchoring writes")
	flag.Parse()
	if flag.NArg() != 2 {
		return fmt.Errorf("usage: mountd [flags] STORE MNT")
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	st, err := location.Open(flag.Arg(0), location.Options{Options: store.Options{ReadOnly: *readOnly, CacheDir: *cacheDir, Logger: log,
		Retention: store.Retention{KeepLast: *keepLast, KeepEvery: *keepEvery, Exact: *keepExact}}})
	if err != nil {
		return err
	}
	defer st.Close()
	opts := wfs.Options{ReadOnly: *readOnly, Debug: *debug, Logger: log, PollInterval: *poll,
		AllowOther: *allowOther, AllowNonEmpty: *allowNonEmpty}
	switch *version {
	case "":
	case "latest":
		opts.Version = wfs.LatestVersion
	default:
		if opts.Version, err = strconv.ParseUint(*version, 10, 64); err != nil {
			return fmt.Errorf("--version %q: %w", *version, err)
		}
		if pin, err := st.Pin(opts.Version); err != nil {
			log.Warn("version not pinned", "version", opts.Version, "err", err)
		} else {
			defer pin.Close()
		}
	}
	// Caught from before the mount: a signal as soon as the mount is there is not lost.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	srv, err := wfs.Mount(st, flag.Arg(1), opts)
	if err != nil {
		return err
	}
	go srv.UnmountOnSignals(sigs, log)
	srv.Wait()
	return st.Close()
}
