package main

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/fs"
	"github.com/weightfs/weightfs/metrics"
)

// weightfs follow MNT DIR keeps the checkpoint directory DIR at MNT's latest version. Each
// round it reads the link MNT/latest (one lookup and one readlink: inotify does not see what
// a FUSE daemon changes, and walking the tree would cost a request per entry), and when it
// names a version newer than the one DIR's state file records (K), it applies the one
// catch-up patch MNT/patches/weight_vN.from_vK.safetensors to DIR (delta.ApplyPatchDir),
// then runs --exec. Everything it does is recorded in DIR's state file before and after
// (docs/format.md Part III §3), and every file change is journaled or atomic, so a follower
// killed at any point and started again finishes the step it was taking, then goes on.
//
// A full copy of the version (MNT/weight_vN, each file written beside its place and renamed)
// is made only when DIR holds no version, or when no patch from its version can exist (gc
// removed it, or the tensor layout changed), or DIR's files are not the version its state
// says, or the version an interrupted step was taking DIR to is gone; each time the follower
// says why.
//
// DIR is the follower's while it runs (it holds DIR's lock: a second follower is refused).
// Its state records every file weightfs put there as it left it (follow_files.go): each
// round checks them with one lstat each and copies again what something else changed, and
// each step gives every file the version's mode and removes the files the version lacks.

// followConfig is what one follower works with.
type followConfig struct {
	e        *env
	mnt, dir string
	exec     string
	sync     bool
	mx       *metrics.Follower // nil: no --metrics-addr
	// announced: the mount was told that patches are read (announce)
	announced bool
}

func cmdFollow(e *env, args []string) error {
	fs := newFlags("follow")
	execCmd := fs.String("exec", "", "run this shell command after each version is in place, with WEIGHTFS_VERSION (the\n"+
		"version), WEIGHTFS_BASE_VERSION (the one before, 0 after a full copy) and WEIGHTFS_DIR (DIR) in its\n"+
		"environment (e.g. a call to an engine's reload endpoint); a failure is reported and following goes on")
	interval := fs.Duration("interval", time.Second, "how often to read MNT/latest (one lookup and one readlink)")
	once := fs.Bool("once", false, "bring DIR to the latest version once, then exit")
	syncFlag := fs.Bool("sync", false, "power-loss safe applies (as weightfs apply --sync)")
	metricsAddr := fs.String("metrics-addr", "", metricsAddrUsage)
	pos, err := parse(e, fs, args, 2, 2)
	if err != nil {
		return err
	}
	if *interval <= 0 {
		return usagef("--interval must be positive")
	}
	mx, stopMetrics, err := startMetrics(e, *metricsAddr)
	if err != nil {
		return err
	}
	defer stopMetrics()
	cfg := &followConfig{e: e, mnt: pos[0], dir: pos[1], exec: *execCmd, sync: *syncFlag, mx: mx.follower()}
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return err
	}
	// DIR is this follower's while it runs: a second follower (or an apply) of it is refused
	// at once, naming this process, rather than racing it file by file.
	unlock, err := delta.LockDir(cfg.dir, true)
	if err != nil {
		return err
	}
	defer unlock()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(stop)
	lastErr := ""
	for {
		cfg.announce()
		err := cfg.step()
		switch {
		case err == nil:
			lastErr = ""
			if *once {
				return nil
			}
		case *once:
			return err
		case err.Error() != lastErr: // a mount that is down fails every round: say it once
			lastErr = err.Error()
			e.log.Warn("follow: step failed (trying again every "+interval.String()+")", "dir", cfg.dir, "err", err)
		}
		select {
		case <-stop:
			return nil
		case <-time.After(*interval):
		}
	}
}

// announce tells the mount, once, that a follower reads its patches: a lookup in MNT/patches/
// (of the latest version's patch, whose size the mount knows from the manifests, so nothing is
// rendered) makes a read-only mount render the patch of each new version as soon as it sees
// the version, so that the follower's next step finds it ready (docs/cli.md, "follow").
func (c *followConfig) announce() {
	if c.announced {
		return
	}
	v, err := c.latest()
	if err != nil {
		return // the mount is not there yet: the next round tries again
	}
	os.Stat(filepath.Join(c.mnt, "patches", fs.PatchName(v)))
	c.announced = true
}

// latest returns the version MNT/latest names.
func (c *followConfig) latest() (uint64, error) {
	target, err := os.Readlink(filepath.Join(c.mnt, "latest"))
	if err != nil {
		return 0, fmt.Errorf("read %s/latest: %w", c.mnt, err)
	}
	v, ok, err := fs.ParseVersionName(filepath.Base(target))
	if !ok || err != nil {
		return 0, fmt.Errorf("%s/latest points to %q, not a version", c.mnt, target)
	}
	return v, nil
}

// step brings DIR to the latest version, finishing first a step a killed follower left.
func (c *followConfig) step() error {
	st, marked, err := delta.ReadDirState(c.dir)
	if err != nil {
		return err
	}
	// The mount first: when it is down, a version that seems gone is not.
	latest, err := c.latest()
	if err != nil {
		return err
	}
	if marked && st.Pending != 0 {
		if c.gone(st.Pending) {
			// DIR holds some files of each version: no patch applies to it, and the pending
			// one will never come back. The record of files says what either put there.
			return c.fullCopy(latest, fmt.Sprintf("version %d, which the interrupted step from version %d was taking %s to, is no longer on the mount (gc removed it)",
				st.Pending, st.Version, c.dir))
		}
		c.logf("finishing the interrupted step from version %d to %d", st.Version, st.Pending)
		if st.Full || st.Version == 0 {
			err = c.fullCopy(st.Pending, "a full copy was interrupted")
		} else {
			err = c.patch(st, st.Pending)
		}
		if err != nil {
			return err
		}
		// Then on to the latest, in this same step: `--once` must end at the latest too.
		if st, marked, err = delta.ReadDirState(c.dir); err != nil {
			return err
		}
		if latest, err = c.latest(); err != nil {
			return err
		}
	}
	switch {
	case !marked || st.Version == 0:
		return c.fullCopy(latest, fmt.Sprintf("%s holds no version", c.dir))
	case st.Version > latest:
		return c.fullCopy(latest, fmt.Sprintf("%s holds version %d, newer than the mount's latest", c.dir, st.Version))
	}
	if st, err = c.check(st); err != nil || st.Version == latest {
		return err
	}
	return c.patch(st, latest)
}

// gone says whether version v is no longer on the mount (lookup ENOENT).
func (c *followConfig) gone(v uint64) bool {
	_, err := os.Stat(filepath.Join(c.mnt, fs.VersionName(v)))
	return errors.Is(err, iofs.ErrNotExist)
}

// check compares every file DIR's state records with the file on disk, one lstat each, and
// when one differs (or nothing is recorded) copies again from the mount what is not the held
// version's (settle). A held version the mount no longer has is left to the step to the
// latest one, which checks every file against that.
func (c *followConfig) check(st delta.DirState) (delta.DirState, error) {
	if st.Files != nil && unchanged(c.dir, st.Files) {
		return st, nil
	}
	if c.gone(st.Version) {
		return st, nil
	}
	want, err := c.listVersion(st.Version)
	if err != nil {
		return st, err
	}
	done, _, err := c.settle(st.Files, st.Version, want, nil, false)
	if err != nil {
		return st, err
	}
	return done, delta.WriteDirState(c.dir, done)
}

// patch takes DIR from st.Version to v by the catch-up patch, or by a full copy when there is
// none or DIR does not hold what its state says.
func (c *followConfig) patch(st delta.DirState, v uint64) error {
	p := filepath.Join(c.mnt, "patches", fs.CatchupPatchName(v, st.Version))
	if _, err := os.Stat(p); errors.Is(err, iofs.ErrNotExist) {
		return c.fullCopy(v, fmt.Sprintf("no patch from version %d to %d can exist (version %d was removed by gc, or the tensor layout changed)",
			st.Version, v, st.Version))
	} else if err != nil {
		return err
	}
	var size int64
	if fi, err := os.Stat(p); err == nil {
		size = fi.Size()
	}
	want, err := c.listVersion(v)
	if err != nil {
		return err
	}
	res, pending, err := delta.ApplyPatchDirStep(p, c.dir, delta.ApplyOptions{Sync: c.sync})
	if errors.Is(err, delta.ErrBaseMismatch) {
		return c.fullCopy(v, fmt.Sprintf("%s does not hold what its state says: %v", c.dir, err))
	}
	if err != nil {
		return err
	}
	// The files the patch named were checked against the version by their result hashes; the
	// others are checked against the record, and the files v lacks removed.
	touched := make(map[string]bool, len(res.Files))
	for _, f := range res.Files {
		touched[f.File] = true
	}
	done, _, err := c.settle(pending.Files, v, want, touched, false)
	if err != nil {
		return err
	}
	c.logf("%s", res)
	if err := delta.WriteDirState(c.dir, done); err != nil {
		return err
	}
	c.mx.Applied("patch", size, c.sealTime(v))
	c.ran(v, st.Version)
	return nil
}

// fullCopy copies version v of the mount into DIR, file by file (written beside its place,
// checked, renamed), under a pending state, and removes the files weightfs put there that v
// lacks.
func (c *followConfig) fullCopy(v uint64, why string) error {
	c.logf("%s: copying version %d whole", why, v)
	st, _, err := delta.ReadDirState(c.dir)
	if err != nil {
		return err
	}
	want, err := c.listVersion(v)
	if err != nil {
		return err
	}
	named := make([]delta.DirFile, len(want))
	for i, m := range want {
		named[i] = delta.DirFile{Path: m.path}
	}
	pending := delta.DirState{Version: st.Version, Pending: v, Full: true, Source: c.mnt, Files: delta.UnionFiles(st.Files, named)}
	if err := delta.WriteDirState(c.dir, pending); err != nil {
		return err
	}
	done, bytes, err := c.settle(pending.Files, v, want, nil, true)
	if err != nil {
		return fmt.Errorf("copy version %d: %w", v, err)
	}
	c.logf("version %d copied whole: %s", v, humanBytes(bytes))
	if err := delta.WriteDirState(c.dir, done); err != nil {
		return err
	}
	c.mx.Applied("full", bytes, c.sealTime(v))
	c.ran(v, 0)
	return nil
}

// sealTime is when version v was sealed: the mount gives a sealed version's directory the
// version's creation time. Zero if it cannot be read (gc removed the version since).
func (c *followConfig) sealTime(v uint64) time.Time {
	fi, err := os.Stat(filepath.Join(c.mnt, fs.VersionName(v)))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// ran runs --exec for version v (reached from base; 0 after a full copy).
func (c *followConfig) ran(v, base uint64) {
	if c.exec == "" {
		return
	}
	cmd := exec.Command("/bin/sh", "-c", c.exec)
	cmd.Env = append(os.Environ(), fmt.Sprintf("WEIGHTFS_VERSION=%d", v), fmt.Sprintf("WEIGHTFS_BASE_VERSION=%d", base), "WEIGHTFS_DIR="+c.dir)
	cmd.Stdout, cmd.Stderr = c.e.stdout, c.e.stderr
	if err := cmd.Run(); err != nil {
		c.logf("--exec for version %d: %v", v, err)
	}
}

func (c *followConfig) logf(format string, args ...any) {
	c.e.log.Info("follow: "+fmt.Sprintf(format, args...), "dir", c.dir)
}
