package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	wfs "github.com/weightfs/weightfs/fs"
	"github.com/weightfs/weightfs/gpu"
	"github.com/weightfs/weightfs/store"
)

func cmdMount(e *env, args []string) error {
	fs := newFlags("mount")
	readOnly := fs.Bool("read-only", false, "serve sealed versions only; every modification fails with EROFS")
	version := fs.String("version", "", "with --read-only: serve this version (a number or 'latest') at the mount root")
	cacheDir := fs.String("cache-dir", "", "this process's index, materialized copy and S3 object cache (default: STORE/cache for a local writer, a directory per store for an S3 writer, a per-process directory for readers)")
	diffMode := fs.String("diff", "auto", "diff backend: auto, cpu or gpu")
	poll := fs.Duration("poll", 0, "with --read-only: how often to look for newly sealed versions (default 500ms, 1s for s3:// stores: each look is a LIST request)")
	sf := addStoreFlags(fs, false)
	debug := fs.Bool("debug", false, "print every FUSE request")
	keepLast, keepEvery := retentionFlags(fs)
	pos, err := parse(e, fs, args, 2, 2)
	if err != nil {
		return err
	}
	if *version != "" && !*readOnly {
		return usagef("--version serves a sealed version and needs --read-only")
	}
	mountProcs()
	// A read-only mount serves the latest version from a local materialized copy in its cache
	// directory, brought forward by the few changed elements each new version adds (a pinned
	// older version needs none).
	opts := store.Options{ReadOnly: *readOnly, CacheDir: *cacheDir, Logf: logTo(e),
		Materialize: *readOnly && (*version == "" || *version == "latest")}
	if err := sf.apply(&opts); err != nil {
		return err
	}
	if opts.Retention, err = retentionPolicy(*readOnly, *keepLast, *keepEvery); err != nil {
		return err
	}
	if *poll == 0 && store.IsS3URL(pos[0]) {
		*poll = store.DefaultS3PollInterval
	}
	if !*readOnly {
		if opts.Diff, err = selectDiff(e, *diffMode); err != nil {
			return err
		}
	}
	st, err := store.Open(pos[0], opts)
	if err != nil {
		gpu.CloseBackend(opts.Diff)
		return err
	}
	defer gpu.CloseBackend(opts.Diff)
	defer st.Close()
	mopts := wfs.Options{ReadOnly: *readOnly, Debug: *debug, Logf: logTo(e), PollInterval: *poll}
	if *version != "" {
		v, err := resolveVersion(st, *version)
		if err != nil {
			return err
		}
		mopts.Version = v
		if *version != "latest" {
			defer pinVersion(e, st, v)()
		}
	}
	// Every signal that ends a daemon asks for an unmount, until one succeeds: a busy mount
	// keeps serving, and the log names what holds it. SIGHUP (a closed terminal) is one of
	// them: its default action would kill the daemon and leave a dead mount. They are caught
	// from before the mount, so that one that comes as soon as the mount is there is not lost.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	srv, err := wfs.Mount(st, pos[1], mopts)
	if err != nil {
		return err
	}
	mode := "read-write"
	if *readOnly {
		mode = "read-only"
	}
	fmt.Fprintf(e.stderr, "weightfs: serving %s %s at %s (unmount with 'umount %s' or Ctrl-C)\n", pos[0], mode, pos[1], pos[1])

	go srv.UnmountOnSignals(sigs, logTo(e))
	srv.Wait()
	return st.Close()
}
