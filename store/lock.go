package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// writerLock is the exclusive flock on STORE/lock held by the one writer. flock locks belong
// to the open file description, so a second Open in the same process is refused as well.
type writerLock struct{ f *os.File }

func acquireWriterLock(path string) (*writerLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
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
	// Closing the descriptor drops the flock.
	return l.f.Close()
}
