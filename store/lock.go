package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// writerLock is what makes the one writer of a store the only one: on a local store the
// exclusive flock on STORE/lock (flock locks belong to the open file description, so a second
// Open in the same process is refused as well); on S3 the lease object PREFIX/lock
// (lease.go).
type writerLock struct {
	f     *os.File
	lease *lease
}

func acquireWriterLock(path string, mode os.FileMode) (*writerLock, error) {
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
	return &writerLock{f: f}, nil
}

func (l *writerLock) release() error {
	if l == nil {
		return nil
	}
	if l.lease != nil {
		return l.lease.release()
	}
	// Closing the descriptor drops the flock.
	return l.f.Close()
}
