package fs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weightfs/weightfs/store"
)

// LatestVersion as Options.Version pins the mount to the newest version sealed at mount time.
const LatestVersion = ^uint64(0)

// DefaultPollInterval is how often a read-only mount asks the store for new versions.
const DefaultPollInterval = 500 * time.Millisecond

const (
	// maxWrite is the largest WRITE (and READ) request the kernel sends us.
	maxWrite = 1 << 20
	// sealedTTL is how long the kernel may cache entries and attributes of sealed versions:
	// they never change, and the root entry of a version is invalidated explicitly when it
	// moves from open to sealed or is removed by gc.
	sealedTTL = time.Hour
	// dynamicTTL covers the root, latest, views and open trees.
	dynamicTTL = time.Second
)

// Options configure Mount.
type Options struct {
	// ReadOnly serves sealed versions only; every modification fails with EROFS.
	ReadOnly bool
	// Version, if not 0, makes the mount point itself that sealed version's directory;
	// LatestVersion resolves to the newest sealed version at mount time.
	Version uint64
	// Debug logs every FUSE request (go-fuse's request trace) through Logger at debug level;
	// the Logger must let debug records through for them to show.
	Debug bool
	// Logger receives the mount's log records (nil: discarded): per-request and per-file
	// lines at debug, versions opened, sealed and seen and refusals at info, damage and
	// failed clean-ups at warn, store failures returned as EIO at error.
	Logger *slog.Logger
	// PollInterval is how often a read-only mount, or a rank's of a writer group, looks for
	// versions sealed by another process (0: DefaultPollInterval); one pinned to a Version
	// refreshes only the store's list (the metrics').
	PollInterval time.Duration
	// StagingDir is where a read-write mount keeps the bytes of open versions, one
	// subdirectory per mount. Empty: the store's staging directory if it offers one, else a
	// fresh directory under os.TempDir().
	StagingDir string
	// AllowOther lets users other than the one who mounted access the mount. It always comes
	// with default_permissions: the kernel then checks each access against the files' modes
	// and owner (the daemon's user), so that another user can neither write into an open
	// version nor read what a mode forbids. As a user other than root it needs
	// user_allow_other in /etc/fuse.conf (checked before mounting, ErrAllowOtherForbidden).
	AllowOther bool
	// DefaultPermissions has the kernel check file modes (default_permissions) without
	// AllowOther.
	DefaultPermissions bool
	// AllowNonEmpty mounts over a directory that holds files (hidden while mounted); without
	// it such a mount point is refused (ErrMountpointNotEmpty).
	AllowNonEmpty bool
	// SlimeSeed is slime's seed checkpoint directory (its --hf-checkpoint, version 000000):
	// on a read-write mount of a store that holds no version, slime's first delta written
	// into deltas/weight_v000001/ is applied to it (store.Store.CommitSlimeDeltaOnSeed).
	SlimeSeed string

	// helperOnly skips mount(2) and mounts through fusermount3, as for an ordinary user
	// (tests of that path run as root).
	helperOnly bool
}

// Server is a running mount.
type Server struct {
	fuse       *fuse.Server
	mountpoint string
	poller     *poller
	done       chan struct{}
	m          *mountState // its counters (Stats)
}

// Mount serves the store at mountpoint until Unmount (or an external umount). It returns once
// the kernel has the mount.
func Mount(st *store.Store, mountpoint string, opts Options) (*Server, error) {
	if st == nil {
		return nil, errors.New("mount: nil store")
	}
	return MountVersionStore(FromStore(st), mountpoint, opts)
}

// MountVersionStore is Mount for any VersionStore.
func MountVersionStore(b VersionStore, mountpoint string, opts Options) (*Server, error) {
	mnt, err := filepath.Abs(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("mount point %s: %w", mountpoint, err)
	}
	log := orDiscard(opts.Logger)
	if err := prepareMountpoint(mnt, log); err != nil {
		return nil, err
	}
	if err := CheckMountpoint(mnt, opts); err != nil {
		return nil, err
	}
	m := newMountState(b, opts.ReadOnly, log)
	var root gofs.InodeEmbedder
	if opts.Version != 0 {
		v := opts.Version
		if v == LatestVersion {
			latest, ok := m.latest()
			if !ok {
				return nil, fmt.Errorf("mount %s at the latest version: %w: the store has none yet", mnt, ErrNoVersion)
			}
			v = latest
		}
		idx, err := m.index(v)
		if err != nil {
			return nil, fmt.Errorf("mount %s at version %d: %w", mnt, v, err)
		}
		root = &sealedDir{m: m, idx: idx, path: ""}
	} else {
		if !opts.ReadOnly {
			if err := m.openStaging(opts.StagingDir); err != nil {
				return nil, err
			}
			m.slimeSeed = opts.SlimeSeed
		}
		root = &rootNode{m: m}
	}

	rawFS := gofs.NewNodeFS(root, nodeOptions(log))
	m.root = root.EmbeddedInode()
	srv, err := mountWithFallback(rawFS, mnt, opts, log)
	if err != nil {
		m.shutdown()
		return nil, err
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		m.shutdown()
		return nil, fmt.Errorf("mount %s: %w", mnt, err)
	}
	m.openFlags.Store(openFileFlags(srv.KernelSettings().Flags64()))
	if err := SetReadAhead(mnt, ReadAheadKiB); err != nil {
		log.Info("kernel read-ahead stays at the FUSE default", "err", err)
	}
	s := &Server{fuse: srv, mountpoint: mnt, done: make(chan struct{}), m: m}
	if poll, follow := pollMode(b, opts); poll {
		interval := opts.PollInterval
		if interval <= 0 {
			interval = DefaultPollInterval
		}
		s.poller = startPoller(m, interval, follow)
	}
	go func() {
		srv.Wait()
		if s.poller != nil {
			s.poller.stop()
		}
		m.shutdown()
		close(s.done)
	}()
	return s, nil
}

// Wait blocks until the file system is unmounted and every open version is dropped.
func (s *Server) Wait() { <-s.done }

// Unmount unmounts the file system and waits until serving has stopped. Open versions are
// aborted: they were never sealed.
func (s *Server) Unmount() error {
	if err := s.fuse.Unmount(); err != nil {
		return fmt.Errorf("unmount %s: %w (files still open? `umount -l %s` detaches it anyway)", s.mountpoint, err, s.mountpoint)
	}
	<-s.done
	return nil
}

func nodeOptions(log *slog.Logger) *gofs.Options {
	ttl := dynamicTTL
	return &gofs.Options{
		EntryTimeout: &ttl,
		AttrTimeout:  &ttl,
		// NegativeTimeout stays nil: a version sealed elsewhere must be found at once.
		// What go-fuse's node layer logs is a protocol surprise (a lost handle, a bad
		// notification): a warning.
		Logger: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		UID:    uint32(os.Getuid()),
		GID:    uint32(os.Getgid()),
	}
}

// mountWithFallback mounts with mount(2) directly when we may (root), and otherwise through
// fusermount3. The two need different spellings of "read-only": a flag for mount(2), an
// option string for fusermount.
func mountWithFallback(rawFS fuse.RawFileSystem, mnt string, opts Options, log *slog.Logger) (*fuse.Server, error) {
	base := fuse.MountOptions{
		FsName:        "weightfs",
		Name:          "weightfs",
		MaxWrite:      maxWrite,
		MaxReadAhead:  maxWrite,
		MaxBackground: 64,
		AllowOther:    opts.AllowOther,
		// The kernel asks for security.capability before every write unless xattrs are
		// refused once; weights carry none.
		DisableXAttrs: true,
		// Every read answers with bytes, never a file to splice from; go-fuse would still
		// try to splice each reply, through a pipe grown to the reply's size, which fails
		// (and logs a line) whenever a reply is larger than fs.pipe-max-size.
		DisableSplice: true,
		// Files of open versions are opened with direct I/O where the kernel grants this
		// (openFileFlags): programs can then still map them shared.
		ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		Debug:             opts.Debug,
		Logger:            fuseLogger(log, opts.Debug),
	}
	if opts.AllowOther || opts.DefaultPermissions {
		base.Options = append(base.Options, "default_permissions")
	}
	derr := errors.New("skipped")
	if !opts.helperOnly {
		direct := base
		direct.DirectMountStrict = true
		direct.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV
		if opts.ReadOnly {
			direct.DirectMountFlags |= syscall.MS_RDONLY
		}
		srv, err := fuse.NewServer(rawFS, mnt, &direct)
		if err == nil {
			return srv, nil
		}
		derr = err
	}
	viaHelper := base
	viaHelper.Options = append([]string(nil), base.Options...)
	if opts.ReadOnly {
		viaHelper.Options = append(viaHelper.Options, "ro")
	}
	srv, ferr := fuse.NewServer(rawFS, mnt, &viaHelper)
	if ferr != nil {
		return nil, fmt.Errorf("mount %s: mount(2): %v; fusermount3: %w (as an ordinary user, install fuse3)", mnt, derr, ferr)
	}
	return srv, nil
}

// prepareMountpoint checks that mnt is a usable directory. A mount point left behind by a dead
// daemon answers ENOTCONN; nothing can be serving it, so it is detached lazily.
func prepareMountpoint(mnt string, log *slog.Logger) error {
	st, err := os.Stat(mnt)
	if errors.Is(err, syscall.ENOTCONN) {
		if derr := detachStale(mnt); derr != nil {
			return fmt.Errorf("mount point %s: %w (transport endpoint is not connected): a daemon died without unmounting; run `umount -l %s` (root) or `fusermount3 -uz %s`: %v",
				mnt, ErrStaleMount, mnt, mnt, derr)
		}
		log.Info("detached a stale mount left by a daemon that died", "mountpoint", mnt)
		st, err = os.Stat(mnt)
	}
	if err != nil {
		return fmt.Errorf("mount point %s: %w", mnt, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("mount point %s: not a directory", mnt)
	}
	return nil
}

func detachStale(mnt string) error {
	uerr := syscall.Unmount(mnt, syscall.MNT_DETACH)
	if uerr == nil {
		return nil
	}
	for _, bin := range []string{"fusermount3", "fusermount"} {
		path, err := exec.LookPath(bin)
		if err != nil {
			continue
		}
		out, err := exec.Command(path, "-uz", mnt).CombinedOutput()
		if err == nil {
			return nil
		}
		return fmt.Errorf("umount: %v; %s -uz: %v: %s", uerr, bin, err, strings.TrimSpace(string(out)))
	}
	return fmt.Errorf("umount: %w (and no fusermount3 found)", uerr)
}
