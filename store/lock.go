package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The writer's lock of a local store is the exclusive flock on STORE/lock: flock locks
// belong to the open file description, so a second Open in the same process is refused as
// well, and the kernel drops the lock when its holder exits. (A store in S3 has a lease
// instead, taken by store/s3; the store holds either as an io.Closer and closes it last.)

// acquireWriterLock takes the flock on path, a file created with the store's mode.
func acquireWriterLock(path string, mode os.FileMode) (*os.File, error) {
	// Created with the store's mode (the umask takes nothing away); an existing one is left
	// as it is.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, mode)
	if err == nil {
		err = f.Chmod(mode)
	} else if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Closing the descriptor drops the flock.
	return f, nil
}

// WriterLockHeld reports whether a process holds the writer's lock of the local store at
// path, by trying the flock without keeping it (flock does not say who holds it).
func WriterLockHeld(path string) (bool, error) {
	f, err := os.OpenFile(filepath.Join(path, "lock"), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("writer lock of %s: %w", path, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return true, nil
		}
		return false, fmt.Errorf("writer lock of %s: %w", path, err)
	}
	return false, nil
}
