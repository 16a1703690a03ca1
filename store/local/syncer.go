package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/weightfs/weightfs/store/format"
)

// Syncer is what a local backend has made durable and what it has yet to: the directories
// that gained or lost a name since the last SyncDirty (objects and packs are put by rename,
// and their directories are fsynced once for many puts), and the count of every fsync it
// made (Stats.Fsyncs). Its zero value is ready to use.
type Syncer struct {
	mu    sync.Mutex
	dirty map[string]bool // directories with renames not yet fsynced

	fsyncs atomic.Int64
}

// Fsyncs is how many fsyncs of files and directories the Syncer made or counted.
func (s *Syncer) Fsyncs() int64 { return s.fsyncs.Load() }

// Counter is the count Fsyncs reads, for fsyncs made elsewhere (WriteFileSynced).
func (s *Syncer) Counter() *atomic.Int64 { return &s.fsyncs }

// SyncDir is SyncDir, counted.
func (s *Syncer) SyncDir(dir string) error { return SyncDir(dir, &s.fsyncs) }

// WriteFileSynced is WriteFileSynced, counted.
func (s *Syncer) WriteFileSynced(path, tmpDir string, data []byte, mode fs.FileMode) error {
	return WriteFileSynced(path, tmpDir, data, mode, &s.fsyncs)
}

// MarkDirty notes that dir gained or lost a name that SyncDirty must make durable.
func (s *Syncer) MarkDirty(dir string) {
	s.mu.Lock()
	if s.dirty == nil {
		s.dirty = map[string]bool{}
	}
	s.dirty[dir] = true
	s.mu.Unlock()
}

// SyncDirty fsyncs every directory marked dirty, the deepest first (objects/ab/ before
// objects/, which gained the new sub-directories); one that fails stays marked.
func (s *Syncer) SyncDirty() error {
	s.mu.Lock()
	dirs := make([]string, 0, len(s.dirty))
	for d := range s.dirty {
		dirs = append(dirs, d)
	}
	s.mu.Unlock()
	slices.SortFunc(dirs, func(x, y string) int { return len(y) - len(x) })
	for _, d := range dirs {
		if err := s.SyncDir(d); err != nil {
			return err
		}
		s.mu.Lock()
		delete(s.dirty, d)
		s.mu.Unlock()
	}
	return nil
}

// PutFile moves tmp, synced and made read-only (modes.Object), to dst, a file of a fan-out
// directory; kind ("object", "pack") names it in errors. The fan-out directory is made when
// missing, and the directory above it too where makeTop says it may be missing (packs/ is
// made with the first pack; objects/ is made with the store). The directories changed are
// marked dirty, for SyncDirty. tmp is the caller's no more: moved, or closed and removed.
func (s *Syncer) PutFile(kind string, id format.ID, tmp *os.File, dst string, makeTop bool, modes Modes) error {
	renamed := false
	defer func() {
		if !renamed {
			RemoveTemp(tmp)
		}
	}()
	err := tmp.Sync()
	CountFsync(&s.fsyncs)
	if err != nil {
		return fmt.Errorf("sync %s %s: %w", kind, id, err)
	}
	// Objects are never written in place: read-only files guard against accidents.
	if err := tmp.Chmod(modes.Object); err != nil {
		return fmt.Errorf("put %s %s: %w", kind, id, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("put %s %s: %w", kind, id, err)
	}
	fan := filepath.Dir(dst)
	if _, err := os.Stat(fan); errors.Is(err, fs.ErrNotExist) {
		top := filepath.Dir(fan)
		if makeTop {
			if _, err := os.Stat(top); errors.Is(err, fs.ErrNotExist) {
				if err := MkdirMode(top, modes.Dir); err != nil && !errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("put %s %s: %w", kind, id, err)
				}
				s.MarkDirty(filepath.Dir(top))
			}
		}
		if err := MkdirMode(fan, modes.Dir); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("put %s %s: %w", kind, id, err)
		}
		s.MarkDirty(top)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("put %s %s: %w", kind, id, err)
	}
	renamed = true
	s.MarkDirty(fan)
	return nil
}
