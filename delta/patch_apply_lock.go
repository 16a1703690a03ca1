package delta

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The lock of a file-level apply (ApplyPatchFileWith). Two applies of one file must not
// interleave: both would pass the base check on the same bytes and write their changes over
// each other, leaving a file that is neither version. ApplyPatchFileWith therefore holds an
// exclusive flock on TARGET.weightfs-apply.lock from before it reads anything of the target
// (the base check, or the journal of an interrupted apply) until the result is written (and,
// with ApplyOptions.Sync, durable) and the journal is gone. A second apply waits for it, then
// reads the first one's result: the same patch finds it already applied, a patch from the
// same base fails its base check and writes nothing. ApplyOptions.NoWait refuses instead.
//
// The lock is a file beside the target rather than the target itself because:
//   - a file carried whole is replaced by a rename, so a lock on the target's inode would be
//     a lock on a file that is no longer the target: an apply waiting on the old inode would
//     get it while a third one locks the new inode;
//   - the target may not exist yet (a file the patch adds);
//   - programs that read the model (engines, copiers) may lock it for purposes of their own.
//
// flock locks belong to the open file description (two opens in one process exclude each
// other) and are dropped by the kernel when the process dies: a killed apply leaves its lock
// file, unlocked, and its journal, and the next apply takes the lock and recovers. The holder
// writes "PID HOST" into the lock file so that a second apply can say whom it waits for, and
// removes the file when it is done, while still holding the lock. An apply that was waiting
// on that file then finds the name gone, or naming another file, and starts again (the usual
// protocol for lock files that are removed).
//
// The lock file is opened with O_NOFOLLOW and must be a regular file with one link: a symbolic
// or hard link planted at its name is refused, never written through.

// LockSuffix is appended to a target's path to name the lock file of its applies.
const LockSuffix = ".weightfs-apply.lock"

// applyLock is a held lock of a target.
type applyLock struct {
	f    *os.File
	path string
}

// maxLockTries bounds how often the lock file may be removed or replaced under a waiter
// before it gives up (each time another apply finished in between).
const maxLockTries = 1000

// lockTarget takes the exclusive lock of target's applies: at once, or after waiting for
// the apply that holds it (calling opts.Waiting), or not at all with opts.NoWait (an error
// wrapping ErrLocked that names the holder).
func lockTarget(target string, opts ApplyOptions) (*applyLock, error) {
	path := target + LockSuffix
	for range maxLockTries {
		f, writable, err := openLockFile(path)
		if err != nil {
			return nil, err
		}
		l, err := takeLock(f, writable, path, opts)
		if err != nil {
			f.Close()
			if errors.Is(err, errLockMoved) {
				continue
			}
			return nil, err
		}
		if l != nil {
			return l, nil
		}
	}
	return nil, fmt.Errorf("lock %s: it was removed or replaced %d times while this apply waited for it", path, maxLockTries)
}

// errLockMoved says that the lock file taken is no longer the one at its path.
var errLockMoved = errors.New("lock file removed or replaced")

// openLockFile opens (or creates) the lock file without following a link. A lock file that
// another user left (a stale one, mode 0644) is opened read-only: flock works on it, but the
// holder cannot be recorded.
func openLockFile(path string) (f *os.File, writable bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
	if errors.Is(err, unix.EACCES) {
		f, err = os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		return f, false, wrapLinkError(err, path, "the lock file of an apply")
	}
	return f, true, wrapLinkError(err, path, "the lock file of an apply")
}

// takeLock flocks f, the file opened at path. It returns the lock, or errLockMoved when the
// path no longer names f once it is locked (its holder removed it: try again).
func takeLock(f *os.File, writable bool, path string, opts ApplyOptions) (*applyLock, error) {
	fd := int(f.Fd())
	err := flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		holder := lockHolder(f)
		if opts.NoWait {
			return nil, fmt.Errorf("%s: %w: %s holds it", path, ErrLocked, holder)
		}
		if opts.Waiting != nil {
			opts.Waiting(fmt.Sprintf("%s, which holds %s", holder, path))
		}
		err = flock(fd, unix.LOCK_EX)
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	var have, named unix.Stat_t
	if err := unix.Fstat(fd, &have); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	switch err := unix.Lstat(path, &named); {
	case errors.Is(err, unix.ENOENT):
		return nil, errLockMoved
	case err != nil:
		return nil, fmt.Errorf("lock %s: %w", path, err)
	case named.Dev != have.Dev || named.Ino != have.Ino:
		return nil, errLockMoved
	case have.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("%s is not a regular file, so not the lock file of an apply; remove it", path)
	case have.Nlink != 1:
		// A hard link: another name of some other file. Writing the holder would change it.
		return nil, fmt.Errorf("%s has %d links, so it is not the lock file of an apply but another name of some file; remove it", path, have.Nlink)
	}
	if writable {
		host, _ := os.Hostname()
		rec := fmt.Appendf(nil, "%d %s\n", os.Getpid(), strings.Join(strings.Fields(host), "_"))
		if err := f.Truncate(0); err != nil {
			return nil, fmt.Errorf("record the holder in %s: %w", path, err)
		}
		if _, err := f.WriteAt(rec, 0); err != nil {
			return nil, fmt.Errorf("record the holder in %s: %w", path, err)
		}
	}
	return &applyLock{f: f, path: path}, nil
}

// flock is unix.Flock, retried when a signal interrupts it.
func flock(fd, how int) error {
	for {
		if err := unix.Flock(fd, how); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// lockHolder describes the holder recorded in a lock file: "process PID on host HOST".
func lockHolder(f *os.File) string {
	var buf [256]byte
	n, _ := f.ReadAt(buf[:], 0)
	pid, host, _ := strings.Cut(string(bytes.TrimSpace(buf[:n])), " ")
	if _, err := strconv.Atoi(pid); err != nil {
		// The holder has not written it yet, or could not (a lock file opened read-only).
		return "a process that has not recorded its id"
	}
	if host == "" {
		return "process " + pid
	}
	return fmt.Sprintf("process %s on host %s", pid, host)
}

// release removes the lock file and drops the lock. The name is removed first, while the
// lock is still held, and only if it still names the locked file; an apply waiting on this
// file notices that it is gone. A lock file that cannot be removed is left: it is harmless,
// the next apply locks it again.
func (l *applyLock) release() {
	var have, named unix.Stat_t
	if unix.Fstat(int(l.f.Fd()), &have) == nil && unix.Lstat(l.path, &named) == nil &&
		have.Dev == named.Dev && have.Ino == named.Ino {
		unix.Unlink(l.path)
	}
	l.f.Close() // drops the flock; a close error on a file only read and locked means nothing
}

// wrapLinkError turns the ELOOP of an O_NOFOLLOW open of path into an error that says a
// symbolic link is where what (a journal, a lock file) should be, and where it points.
func wrapLinkError(err error, path, what string) error {
	if err == nil || !errors.Is(err, unix.ELOOP) {
		return err
	}
	dest, rerr := os.Readlink(path)
	if rerr != nil {
		dest = "?"
	}
	return fmt.Errorf("%s is a symbolic link (to %q), not %s: an apply never follows links there; remove it", path, dest, what)
}
