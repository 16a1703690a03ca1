package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	wfs "github.com/weightfs/weightfs/fs"
	"github.com/weightfs/weightfs/gpu"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
	"github.com/weightfs/weightfs/store/s3"
)

func cmdMount(e *env, args []string) error {
	fs := newFlags("mount")
	var mf mountFlags
	var opts optList
	fs.BoolVar(&mf.readOnly, "read-only", false, "serve sealed versions only; every modification fails with EROFS (-o ro)")
	fs.StringVar(&mf.version, "version", "", "with --read-only: serve this version (a number or 'latest') at the mount root (-o version=N)")
	fs.StringVar(&mf.cacheDir, "cache-dir", "", "this process's index, materialized copy and S3 object cache (default: STORE/cache for a local writer, a directory per store for an S3 writer, a per-process directory for readers) (-o cache_dir=DIR)")
	diffMode := fs.String("diff", "auto", "diff backend: auto, cpu or gpu")
	fs.DurationVar(&mf.poll, "poll", 0, "with --read-only: how often to look for newly sealed versions (default 500ms; 250ms for s3:// stores, where each look is a conditional GET of a 32-byte object and versions are listed only when it changed) (-o poll=DURATION)")
	fs.BoolVar(&mf.allowOther, "allow-other", false, "let every user of the machine use the mount (-o allow_other; always with default_permissions: the kernel checks the files' modes; as a user other than root it needs user_allow_other in /etc/fuse.conf)")
	fs.BoolVar(&mf.allowNonEmpty, "allow-non-empty", false, "mount over a directory that holds files, hiding them (-o allow_non_empty)")
	fs.Var(&opts, "o", "mount options, comma-separated, as in fstab: ro, allow_other, default_permissions, allow_non_empty, version=N, cache_dir=DIR, poll=DURATION, log_level=LEVEL, log_format=text|json, log_file=FILE, keep_last=N, keep_every=K, keep_exact, metrics_addr=HOST:PORT, file_copies=SIZE, base_memory=SIZE, debug, s3_endpoint=URL, s3_region=NAME, s3_path_style, s3_cache_size=SIZE; fstab's defaults, noauto, nofail, _netdev, user, rw and x-* are accepted and ignored")
	sf := addStoreFlags(fs, false)
	fs.BoolVar(&mf.debug, "debug", false, "log at debug level and trace every FUSE request (-o debug)")
	retentionFlags(fs, &mf)
	fs.StringVar(&mf.fileCopies, "file-copies", "", "with --read-only: disk for the checked copies of older versions' files that reads make in the cache directory, e.g. 4G (default 16G; 0: none, every read of an older version replays its deltas) (-o file_copies=SIZE)")
	fs.StringVar(&mf.baseMemory, "base-memory", "", "read-write: memory in which the writer keeps the latest version's tensors, so that the next version's diffs read their bases from memory rather than from disk, e.g. 16G; a version larger than it is not kept (default: a sixteenth of the node's RAM, at most 8G; 0: off) (-o base_memory=SIZE)")
	gf := addGroupFlags(fs)
	fs.StringVar(&mf.metricsAddr, "metrics-addr", "", metricsAddrUsage+" (-o metrics_addr=HOST:PORT)")
	slimeSeed := fs.String("slime-seed", "", "read-write: slime's seed checkpoint (its --hf-checkpoint, version 000000), which slime's first delta written into deltas/weight_v000001/ builds on when the store holds no version yet")
	pos, err := parse(e, fs, args, 2, 2)
	if err != nil {
		return err
	}
	for _, o := range opts {
		if err := applyMountOptions(&mf, o); err != nil {
			return usagef("%v", err)
		}
	}
	// -o s3_* options stand for the --s3-* flags (a flag given too loses: -o comes last in
	// fstab's spelling and in a unit's ExecStart).
	for p, v := range map[*string]string{sf.endpoint: mf.s3Endpoint, sf.region: mf.s3Region, sf.cacheSize: mf.s3CacheSize} {
		if v != "" {
			*p = v
		}
	}
	*sf.pathStyle = *sf.pathStyle || mf.s3PathStyle
	if mf.version != "" && !mf.readOnly {
		return usagef("--version serves a sealed version and needs --read-only")
	}
	if err := gf.check(mf.readOnly); err != nil {
		return err
	}
	// A daemon must not die of a closed log pipe (mount.weightfs stops reading the daemon's
	// output once the mount serves): the mount would stay behind, dead. Writes then fail
	// with EPIPE instead.
	signal.Ignore(syscall.SIGPIPE)
	// The log as the flags and then -o say (-o comes last, as for the S3 options). An error
	// that ends the command still goes to the caller's stderr (run prints it there).
	ls := logSettingsOf(fs)
	for p, v := range map[*string]string{&ls.level: mf.logLevel, &ls.format: mf.logFormat, &ls.file: mf.logFile} {
		if v != "" {
			*p = v
		}
	}
	ls.debug = mf.debug
	if err := e.startLog(ls); err != nil {
		return err
	}
	mx, stopMetrics, err := startMetrics(e, mf.metricsAddr)
	if err != nil {
		return err
	}
	defer stopMetrics()
	mountProcs()
	mopts := wfs.Options{ReadOnly: mf.readOnly, Debug: mf.debug, Logger: e.log, PollInterval: mf.poll,
		AllowOther: mf.allowOther, DefaultPermissions: mf.defaultPerms, AllowNonEmpty: mf.allowNonEmpty}
	if *slimeSeed != "" {
		if mopts.SlimeSeed, err = filepath.Abs(*slimeSeed); err != nil {
			return err
		}
	}
	if mnt, err := filepath.Abs(pos[1]); err == nil {
		if err := wfs.CheckMountpoint(mnt, mopts); err != nil {
			return err
		}
	}
	// A read-only mount serves the latest version from a local materialized copy in its cache
	// directory, brought forward by the few changed elements each new version adds (a pinned
	// older version needs none).
	sopts := location.Options{Options: store.Options{ReadOnly: mf.readOnly, CacheDir: mf.cacheDir, Logger: e.log,
		Materialize: mf.readOnly && (mf.version == "" || mf.version == "latest")}}
	if err := sf.apply(&sopts); err != nil {
		return err
	}
	sopts.Observer = mx.storeObserver()
	sopts.Failpoint = failpointFromEnv(e.log)
	if sopts.FileCopyBytes, err = fileCopyBytes(mf.fileCopies); err != nil {
		return err
	}
	if sopts.BaseMemory, err = baseMemoryBytes(mf.baseMemory, mf.readOnly, memTotal()); err != nil {
		return err
	}
	if sopts.Retention, err = retentionPolicy(mf.readOnly, mf.keepLast, mf.keepEvery, mf.keepExact); err != nil {
		return err
	}
	if mf.poll == 0 && !location.IsLocal(pos[0]) {
		mf.poll = s3.DefaultPollInterval
	}
	if !mf.readOnly {
		if sopts.Diff, err = selectDiff(e, *diffMode); err != nil {
			return err
		}
	}
	var st *store.Store
	if gf.name != "" {
		st, err = location.OpenRank(pos[0], store.Rank{Group: gf.name, Rank: gf.rank, Ranks: gf.ranks}, sopts)
	} else {
		st, err = location.Open(pos[0], sopts)
	}
	if err != nil {
		gpu.CloseBackend(sopts.Diff)
		return err
	}
	defer gpu.CloseBackend(sopts.Diff)
	defer st.Close()
	if gf.publish {
		stopPublisher, err := startPublisher(e, pos[0], gf, sopts)
		if err != nil {
			return err
		}
		defer stopPublisher()
	}
	mx.addStore(st)
	mopts.PollInterval = mf.poll
	if mf.version != "" {
		v, err := resolveVersion(st, mf.version)
		if err != nil {
			return err
		}
		mopts.Version = v
		// Pinned, "latest" too: the version that was latest at mount time is served, and gc
		// keeps it, for as long as the mount lasts.
		defer pinVersion(e, st, v)()
	}
	// Every signal that ends a daemon asks for an unmount, until one succeeds: a busy mount
	// keeps serving, and the log names what holds it. SIGHUP (a closed terminal) is one of
	// them: its default action would kill the daemon and leave a dead mount. They are caught
	// from before the mount, so that one that comes as soon as the mount is there is not lost.
	sigs := make(chan os.Signal, 4)
	defer close(sigs) // after Stop: ends notifyStopping's loop
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	vs := wfs.FromStore(st)
	if gf.name != "" {
		vs = wfs.FromRank(st, gf.wait)
	}
	srv, err := wfs.MountVersionStore(vs, pos[1], mopts)
	if err != nil {
		return err
	}
	mx.addMount(srv)
	mode := "read-write"
	if mf.readOnly {
		mode = "read-only"
	}
	e.log.Info(fmt.Sprintf("serving %s %s at %s (unmount with 'umount %s' or Ctrl-C)", pos[0], mode, pos[1], pos[1]))
	// Mount returns once the kernel has sent INIT and got its answer: the mount serves, so a
	// service manager (or mount.weightfs) may now start what reads it.
	if err := sdNotify("READY=1\nSTATUS=serving " + pos[1]); err != nil {
		e.log.Warn("systemd notification", "err", err)
	}
	go srv.UnmountOnSignals(notifyStopping(sigs), e.log)
	srv.Wait()
	return st.Close()
}

// notifyStopping passes signals on, telling the service manager STOPPING=1 at the first one.
func notifyStopping(sigs <-chan os.Signal) <-chan os.Signal {
	out := make(chan os.Signal, 4)
	go func() {
		first := true
		for sig := range sigs {
			if first {
				first = false
				// Best effort, unlogged: under mount.weightfs the socket went with the
				// helper once the mount served, and systemd does not need the message.
				_ = sdNotify("STOPPING=1")
			}
			out <- sig
		}
	}()
	return out
}
