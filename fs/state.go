package fs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/weightfs/weightfs/store"
)

// mountState is what every node of one mount shares.
//
// Lock order: an openTree's mu before mountState.mu; never the other way round. Namespace
// operations at the root are serialised by the kernel (it holds the root directory's lock
// for mkdir, rmdir and rename), but seals run from FLUSH, outside that lock.
type mountState struct {
	b        VersionStore // the store the mount serves
	readOnly bool
	log      *slog.Logger
	root     *gofs.Inode
	started  time.Time // the time stamp of what has none of its own (views, an empty root)

	// stagingRoot is this mount's directory of staging files ("" on a read-only mount).
	stagingRoot string
	// slimeSeed is Options.SlimeSeed (view_deltas_in.go).
	slimeSeed string
	// openFlags are the open flags of files of open versions (openFileFlags), set once the
	// kernel has said what it supports.
	openFlags atomic.Uint32

	mu       sync.Mutex
	trees    map[string]*openTree     // open versions and staging directories, by root name
	reserved map[uint64]bool          // numbers being sealed by a rename
	indexes  map[uint64]*versionIndex // sealed versions already listed
	seen     []uint64                 // sealed versions at the last poll
	seq      uint64                   // names staging files and trees

	stats mountStats // what it did, for metrics (stats.go)
	// patchView is the patches/ view once something looked up a patch in it: the poller
	// then renders each new version's patch ahead (poll.go).
	patchView atomic.Pointer[patchesView]
}

func newMountState(b VersionStore, readOnly bool, log *slog.Logger) *mountState {
	m := &mountState{
		b:        b,
		readOnly: readOnly,
		log:      log,
		trees:    map[string]*openTree{},
		reserved: map[uint64]bool{},
		indexes:  map[uint64]*versionIndex{},
		started:  time.Now(),
	}
	m.seen = versionNumbers(b.Versions())
	return m
}

// modErrno is the answer to a modification of something immutable.
func (m *mountState) modErrno() syscall.Errno {
	if m.readOnly {
		return syscall.EROFS
	}
	return syscall.EPERM
}

// refuse logs why an operation is refused and returns errno.
func (m *mountState) refuse(errno syscall.Errno, format string, args ...any) syscall.Errno {
	m.stats.countErrno(errno)
	m.log.Info("refused: "+fmt.Sprintf(format, args...), "errno", errnoName(errno))
	return errno
}

// fail logs a store or staging failure and returns the errno for it.
func (m *mountState) fail(err error, format string, args ...any) syscall.Errno {
	errno := toErrno(err)
	m.stats.countErrno(errno)
	level := slog.LevelWarn
	if errno == syscall.EIO {
		level = slog.LevelError
	}
	m.log.Log(context.Background(), level, fmt.Sprintf(format, args...), "err", err, "errno", errnoName(errno))
	return errno
}

func (m *mountState) nextSeq() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nextSeqLocked()
}

func (m *mountState) nextSeqLocked() uint64 {
	m.seq++
	return m.seq
}

// latestTime is when the newest version was sealed, or the mount time.
func (m *mountState) latestTime() time.Time {
	vs := m.b.Versions()
	if len(vs) == 0 || vs[len(vs)-1].Created.IsZero() {
		return m.started
	}
	return vs[len(vs)-1].Created
}

// latest is the newest sealed version.
func (m *mountState) latest() (uint64, bool) {
	vs := m.b.Versions()
	if len(vs) == 0 {
		return 0, false
	}
	return vs[len(vs)-1].Number, true
}

// sealedInfo finds a sealed version.
func (m *mountState) sealedInfo(v uint64) (store.VersionInfo, bool) {
	vs := m.b.Versions()
	i := sort.Search(len(vs), func(i int) bool { return vs[i].Number >= v })
	if i < len(vs) && vs[i].Number == v {
		return vs[i], true
	}
	return store.VersionInfo{}, false
}

// index returns the entry index of sealed version v, listing it from the store once.
func (m *mountState) index(v uint64) (*versionIndex, error) {
	m.mu.Lock()
	idx := m.indexes[v]
	m.mu.Unlock()
	if idx != nil {
		return idx, nil
	}
	info, ok := m.sealedInfo(v)
	if !ok {
		return nil, fmt.Errorf("version %d: %w", v, ErrNoVersion)
	}
	entries, err := m.b.Entries(v)
	if err != nil {
		return nil, fmt.Errorf("list version %d: %w", v, err)
	}
	idx, err = buildIndex(info, entries)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev := m.indexes[v]; prev != nil {
		return prev, nil
	}
	m.indexes[v] = idx
	return idx, nil
}

// checkNewNumber decides whether a new version v may be opened or sealed now: it must be
// above every sealed, open and reserved number. Caller holds m.mu.
func (m *mountState) checkNewNumberLocked(v uint64, what string) syscall.Errno {
	errno, reason := m.newNumberProblemLocked(v)
	if errno != 0 {
		return m.refuse(errno, "%s: %s", what, reason)
	}
	return 0
}

// newNumberProblemLocked says why v may not be opened or sealed now (0: it may). Caller holds
// m.mu.
func (m *mountState) newNumberProblemLocked(v uint64) (syscall.Errno, string) {
	if _, ok := m.sealedInfo(v); ok {
		return syscall.EEXIST, fmt.Sprintf("version %d is already sealed", v)
	}
	newest, newestWhat := uint64(0), ""
	if latest, ok := m.latest(); ok {
		newest, newestWhat = latest, "sealed"
	}
	for _, t := range m.trees {
		if t.number == v {
			return syscall.EEXIST, fmt.Sprintf("version %d is already open", v)
		}
		if t.number > newest {
			newest, newestWhat = t.number, "open"
		}
	}
	for r := range m.reserved {
		if r == v {
			return syscall.EEXIST, fmt.Sprintf("version %d is being sealed", v)
		}
		if r > newest {
			newest, newestWhat = r, "being sealed"
		}
	}
	if v <= newest {
		return syscall.EINVAL, fmt.Sprintf("version %d is not above the newest version %d (%s); version numbers must grow: use %s or above",
			v, newest, newestWhat, VersionName(newest+1))
	}
	return 0, ""
}

// openStaging creates this mount's staging directory under dir (or the store's, or a
// temporary one), removing what dead mounts left there.
func (m *mountState) openStaging(dir string) error {
	if dir == "" {
		d, err := m.b.StagingDir()
		if err != nil {
			return fmt.Errorf("staging directory of the store: %w", err)
		}
		dir = d
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "weightfs-staging-")
		if err != nil {
			return fmt.Errorf("create staging directory: %w", err)
		}
		m.stagingRoot = d
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create staging directory %s: %w", dir, err)
	}
	removeDeadMounts(dir, m.log)
	d, err := os.MkdirTemp(dir, fmt.Sprintf("mount-%d-", os.Getpid()))
	if err != nil {
		return fmt.Errorf("create staging directory in %s: %w", dir, err)
	}
	m.stagingRoot = d
	return nil
}

// removeDeadMounts deletes staging directories of mounts whose process is gone (a daemon
// killed mid-write leaves its open versions' bytes behind; they can never be sealed).
func removeDeadMounts(dir string, log *slog.Logger) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "mount-")
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive, or not ours to judge
		}
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			log.Warn("remove staging files of a dead mount", "dir", p, "err", err)
		} else {
			log.Info("removed staging files of a dead mount", "dir", p)
		}
	}
}

// shutdown drops every open tree (never sealed, so never visible) and the staging files.
func (m *mountState) shutdown() {
	m.mu.Lock()
	trees := make([]*openTree, 0, len(m.trees))
	for _, t := range m.trees {
		trees = append(trees, t)
	}
	m.trees = map[string]*openTree{}
	m.mu.Unlock()
	for _, t := range trees {
		// The contract drops what was never sealed; a trainer that unmounted too early
		// learns from this line what it lost.
		files, bytes, names := t.describeFiles()
		what := "dropped an open version at unmount: it was never sealed, its files are not stored"
		if t.number == 0 {
			what = "dropped a staging directory at unmount: it was never renamed to a version, its files are not stored"
		}
		m.log.Warn(what, "dir", t.name, "version", t.number, "files", files, "bytes", bytes, "names", names)
		t.abort(true)
	}
	if m.stagingRoot != "" {
		if err := os.RemoveAll(m.stagingRoot); err != nil {
			m.log.Warn("remove staging directory", "dir", m.stagingRoot, "err", err)
		}
	}
}

func versionNumbers(vs []store.VersionInfo) []uint64 {
	out := make([]uint64, len(vs))
	for i, v := range vs {
		out[i] = v.Number
	}
	return out
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.EPERM:
		return "EPERM"
	case syscall.EROFS:
		return "EROFS"
	case syscall.EEXIST:
		return "EEXIST"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EIO:
		return "EIO"
	case syscall.ENOSPC:
		return "ENOSPC"
	case syscall.EXDEV:
		return "EXDEV"
	case syscall.ENOTEMPTY:
		return "ENOTEMPTY"
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.ENODATA:
		return "ENODATA"
	case syscall.ECANCELED:
		return "ECANCELED"
	case syscall.ENAMETOOLONG:
		return "ENAMETOOLONG"
	}
	return e.Error()
}
