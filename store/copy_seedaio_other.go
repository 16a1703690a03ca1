//go:build !(linux && (amd64 || arm64))

package store

import (
	"errors"
	"os"
	"time"
)

// aioQueue: Linux's native asynchronous I/O, where it is (copy_seedaio_linux.go); elsewhere a
// seed's goroutine writes it.
type aioQueue struct{ waited time.Duration }

func newAIOQueue(*os.File) (*aioQueue, error) {
	return nil, errors.New("no asynchronous I/O on this platform")
}

func (*aioQueue) page() []byte { return alignedBuffer(directAlign) }

func (*aioQueue) submit([]byte, int64, *chunk, []byte, *chunkPool, time.Time) error {
	return errors.ErrUnsupported
}

func (*aioQueue) close(*chunkPool) error { return nil }

func (*aioQueue) drain(*chunkPool) error { return nil }
