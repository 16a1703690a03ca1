package fs

import (
	"errors"
	"syscall"

	"github.com/weightfs/weightfs/store"
)

// Sentinel errors of the package. Callers test with errors.Is; messages carry context.
var (
	// ErrStaleMount marks a mount point left behind by a daemon that died ("transport
	// endpoint is not connected") that could not be cleaned up automatically.
	ErrStaleMount = errors.New("stale FUSE mount point")
	// ErrNoVersion marks Options.Version naming a version the store does not have.
	ErrNoVersion = errors.New("no such sealed version")
	// ErrMountpointNotEmpty marks a mount point that holds files, which a mount would hide
	// (Options.AllowNonEmpty mounts anyway).
	ErrMountpointNotEmpty = errors.New("mount point is not empty")
	// ErrAlreadyMounted marks a mount point that is already the mount point of a live file
	// system: a second mount on top would hide the first one's files from every process.
	ErrAlreadyMounted = errors.New("mount point is already mounted")
	// ErrAllowOtherForbidden marks Options.AllowOther asked by a user other than root where
	// /etc/fuse.conf lacks user_allow_other: fusermount3 would refuse the mount.
	ErrAllowOtherForbidden = errors.New("allow_other needs user_allow_other in /etc/fuse.conf")

	// errWriteFailed marks a seal refused because a file of the tree misses bytes whose
	// write failed (writefail.go); it reaches the kernel as EIO.
	errWriteFailed = errors.New("a write into the version failed")

	// errBadVersionName marks a directory name that starts like a version but is not one.
	errBadVersionName = errors.New("not a canonical version name")
)

// toErrno turns an error from the store or the staging area into the errno the kernel gets.
// Damage comes first: an error marked store.ErrCorrupt is EIO whatever else its chain holds,
// since a missing object file carries the OS's ENOENT, which would tell the reader that a
// file it has just listed does not exist. Then an errno inside the chain (ENOSPC, EDQUOT from
// the OS) passes through; then the store's sentinels map to the nearest errno; everything
// else is EIO: the caller can only retry or give up, and the log line carries the message.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if errors.Is(err, store.ErrCorrupt) {
		return syscall.EIO
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 {
		return errno
	}
	for _, m := range storeErrnos {
		if errors.Is(err, m.err) {
			return m.errno
		}
	}
	return syscall.EIO
}

// storeErrnos maps the store's sentinel errors to the errno that describes them best.
var storeErrnos = []struct {
	err   error
	errno syscall.Errno
}{
	{store.ErrVersionNotAbove, syscall.EINVAL},
	{store.ErrVersionOutOfRange, syscall.EINVAL},
	{store.ErrNameTooLong, syscall.ENAMETOOLONG},
	{store.ErrVersionBusy, syscall.EEXIST},
	{store.ErrNoSuchVersion, syscall.ENOENT},
	{store.ErrNoSuchFile, syscall.ENOENT},
	{store.ErrEmptyVersion, syscall.EINVAL},
	{store.ErrBadPatch, syscall.EINVAL},
	{store.ErrBadPath, syscall.EINVAL},
	{store.ErrReadOnly, syscall.EROFS},
	{store.ErrLocked, syscall.EBUSY},
	{store.ErrClosed, syscall.EIO},
	{store.ErrGroupRefused, syscall.ECANCELED},
	{errNoFiles, syscall.ENODATA},
}
