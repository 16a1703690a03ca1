//go:build linux && (amd64 || arm64)

package store

import (
	"fmt"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// aioQueue writes a seed file's pages with Linux's native asynchronous I/O (io_submit), which
// for a file opened with O_DIRECT hands each write to the disk and returns at once: the
// hasher that has the bytes in hand issues the write itself and goes on hashing, and no
// goroutine needs a turn on a core per write (copy_seed.go's seedWriter says why that
// matters). At most aioDepth writes are in flight; the memory of each (a chunk, which keeps a
// reference until the write completes, or a page of its own) stays untouched until then.
//
// ext4 and XFS run a direct write that extends the file synchronously inside io_submit, so
// the file's size is set ahead of the writes (aioGrow at a time, a sparse extent) and cut to
// the bytes written at the end.
type aioQueue struct {
	ctx      uintptr
	fd       uintptr
	slots    [aioDepth]aioSlot
	free     []int // slots not in flight
	events   [aioDepth]aioEvent
	pages    [][]byte // directAlign pages whose writes completed
	sized    int64    // the file's size as set ahead of the writes
	inflight int
	waited   time.Duration // how long reap waited for the disk
	err      error         // the first failed write
}

const (
	aioDepth = 4
	aioGrow  = 64 << 20
)

type aioSlot struct {
	cb   aioIocb
	c    *chunk // the chunk whose memory is written, holding a reference; or
	page []byte // the page written
	n    int64
}

// aioIocb is struct iocb of linux/aio_abi.h on a little-endian machine (64 bytes).
// The fields this writer leaves zero are blank (aio_key, aio_rw_flags, aio_reqprio,
// aio_reserved2, aio_flags, aio_resfd).
type aioIocb struct {
	data   uint64
	_      uint32
	_      int32
	opcode uint16
	_      int16
	fd     uint32
	buf    uint64
	nbytes uint64
	offset int64
	_      uint64
	_      uint32
	_      uint32
}

// aioEvent is struct io_event.
type aioEvent struct {
	data, obj uint64
	res, res2 int64
}

const aioCmdPwrite = 1

// newAIOQueue sets up a queue for f (opened with O_DIRECT), or says why not.
func newAIOQueue(f *os.File) (*aioQueue, error) {
	q := &aioQueue{fd: f.Fd()}
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, aioDepth, uintptr(unsafe.Pointer(&q.ctx)), 0); e != 0 {
		return nil, fmt.Errorf("io_setup: %w", e)
	}
	for i := range aioDepth {
		q.free = append(q.free, i)
	}
	return q, nil
}

// page returns a directAlign page for the bytes of a page that straddles pieces.
func (q *aioQueue) page() []byte {
	if n := len(q.pages); n > 0 {
		p := q.pages[n-1]
		q.pages = q.pages[:n-1]
		return p
	}
	return alignedBuffer(directAlign)
}

// submit starts writing b (whole aligned pages) at off, from the memory of c (whose reference
// for the write is given up when it completes) or of page. It waits for a slot while aioDepth
// writes are in flight, but not past deadline (zero: no limit): then it returns
// errSeedBehind, with b's owner still the caller's.
func (q *aioQueue) submit(b []byte, off int64, c *chunk, page []byte, pool *chunkPool, deadline time.Time) error {
	if q.err != nil {
		return q.err
	}
	if err := q.reap(0, pool, time.Time{}); err != nil {
		return err
	}
	for len(q.free) == 0 {
		if err := q.reap(1, pool, deadline); err != nil {
			return err
		}
	}
	end := off + int64(len(b))
	if end > q.sized {
		size := (end + aioGrow) &^ (directAlign - 1)
		if err := unix.Ftruncate(int(q.fd), size); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		q.sized = size
	}
	i := q.free[len(q.free)-1]
	s := &q.slots[i]
	*s = aioSlot{c: c, page: page, n: int64(len(b)), cb: aioIocb{
		data: uint64(i), opcode: aioCmdPwrite, fd: uint32(q.fd),
		buf: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), nbytes: uint64(len(b)), offset: off,
	}}
	cbs := [1]*aioIocb{&s.cb}
	if _, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, q.ctx, 1, uintptr(unsafe.Pointer(&cbs[0]))); e != 0 {
		*s = aioSlot{}
		return fmt.Errorf("seed: io_submit: %w", e)
	}
	q.free = q.free[:len(q.free)-1]
	q.inflight++
	return nil
}

// reap takes the completed writes, waiting for at least min of them, but not past deadline
// (zero: no limit; then errSeedBehind).
func (q *aioQueue) reap(min int, pool *chunkPool, deadline time.Time) error {
	if q.inflight == 0 {
		return nil
	}
	var ts *unix.Timespec
	if min == 0 {
		ts = &unix.Timespec{}
	} else if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return errSeedBehind
		}
		t := unix.NsecToTimespec(left.Nanoseconds())
		ts = &t
	}
	if min > 0 {
		defer func(began time.Time) { q.waited += time.Since(began) }(time.Now())
	}
	n, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, q.ctx, uintptr(min), uintptr(len(q.events)),
		uintptr(unsafe.Pointer(&q.events[0])), uintptr(unsafe.Pointer(ts)), 0)
	if e == unix.EINTR {
		return nil
	}
	if e != 0 {
		return fmt.Errorf("seed: io_getevents: %w", e)
	}
	if int(n) < min {
		return errSeedBehind
	}
	for _, ev := range q.events[:n] {
		s := &q.slots[ev.data]
		if ev.res != s.n && q.err == nil {
			if ev.res < 0 {
				q.err = fmt.Errorf("seed: write: %w", unix.Errno(-ev.res))
			} else {
				q.err = fmt.Errorf("seed: short write (%d of %d bytes)", ev.res, s.n)
			}
		}
		s.c.release(pool)
		if s.page != nil {
			q.pages = append(q.pages, s.page)
		}
		*s = aioSlot{}
		q.free = append(q.free, int(ev.data))
		q.inflight--
	}
	return q.err
}

// drain waits for every write in flight.
func (q *aioQueue) drain(pool *chunkPool) error {
	for q.inflight > 0 {
		if err := q.reap(1, pool, time.Time{}); err != nil && err != q.err {
			if q.err == nil {
				q.err = err
			}
			break // io_getevents itself failed; io_destroy waits for the rest
		}
	}
	return q.err
}

// close waits for the writes in flight and ends the queue.
func (q *aioQueue) close(pool *chunkPool) error {
	err := q.drain(pool)
	unix.Syscall(unix.SYS_IO_DESTROY, q.ctx, 0, 0)
	return err
}

// The kernel's layouts: a struct of another size would be read wrongly, not refused.
var (
	_ [64 - unsafe.Sizeof(aioIocb{})]struct{}
	_ [unsafe.Sizeof(aioIocb{}) - 64]struct{}
	_ [32 - unsafe.Sizeof(aioEvent{})]struct{}
	_ [unsafe.Sizeof(aioEvent{}) - 32]struct{}
)
