package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/weightfs/weightfs/store"
)

const (
	// headLen is what a first small read of an uncached object fetches: the object header
	// and the chunk table of objects up to 4 GiB, all the store reads to plan (meta,
	// objectInfo) without the object's content.
	headLen = 16 << 10
	// smallObject: objects up to this size are fetched whole at their first read.
	smallObject = 64 << 10
)

// remoteObject is an open object that is not in the local cache yet. Reads inside the first
// headLen bytes are served by one ranged GET; any other read fetches the whole object into
// the cache first (once per process, however many readers ask: fetch).
type remoteObject struct {
	b    *Backend
	id   store.ID
	size int64

	mu   sync.Mutex
	head []byte
	file *os.File
}

func (o *remoteObject) Size() int64 { return o.size }

func (o *remoteObject) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("object %s: read at negative offset %d", o.id, off)
	}
	if off >= o.size {
		return 0, io.EOF
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	end := min(off+int64(len(p)), o.size)
	if o.file == nil && o.size > smallObject && end <= headLen {
		if o.head == nil {
			head := make([]byte, headLen)
			if err := o.b.c.getRange(o.b.ctx, o.b.objectKey(o.id), "", 0, headLen, byteWriterAt(head)); err != nil {
				return 0, fmt.Errorf("object %s: %w", o.id, err)
			}
			o.head = head
		}
		n := copy(p, o.head[off:end])
		if n < len(p) {
			return n, io.EOF
		}
		return n, nil
	}
	if o.file == nil {
		f, err := o.b.fetch(o.id)
		if err != nil {
			return 0, err
		}
		o.file = f
	}
	return o.file.ReadAt(p, off)
}

func (o *remoteObject) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.file != nil {
		err := o.file.Close()
		o.file = nil
		return err
	}
	return nil
}

// byteWriterAt lets a download fill a byte slice.
type byteWriterAt []byte

func (b byteWriterAt) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(b)) {
		return 0, fmt.Errorf("write of %d bytes at %d past a buffer of %d", len(p), off, len(b))
	}
	return copy(b[off:], p), nil
}

// fetchFlight is one download of an object that other readers of it wait for.
type fetchFlight struct {
	done chan struct{}
	err  error
}

// fetch returns an open descriptor of the whole object id, downloading it into the cache
// unless it is there. Concurrent fetches of one object download it once.
func (b *Backend) fetch(id store.ID) (*os.File, error) {
	for range 3 {
		if f, _, ok := b.openCached(id); ok {
			b.c.stats.add(&b.c.stats.cacheHits, 1)
			return f, nil
		}
		b.mu.Lock()
		fl, running := b.flights[id]
		if !running {
			fl = &fetchFlight{done: make(chan struct{})}
			b.flights[id] = fl
		}
		b.mu.Unlock()
		if running {
			<-fl.done
			if fl.err != nil {
				return nil, fl.err
			}
			continue // in the cache now, unless it was evicted at once
		}
		f, err := b.download(id)
		b.mu.Lock()
		delete(b.flights, id)
		b.mu.Unlock()
		fl.err = err
		close(fl.done)
		return f, err
	}
	return nil, fmt.Errorf("object %s: evicted as soon as it was fetched (the object cache is smaller than the objects being read)", id)
}

// download fetches object id whole into the cache, checks that the file is complete and
// intact (its CRC-32C trailer), and returns it open.
func (b *Backend) download(id store.ID) (*os.File, error) {
	select {
	case b.dl <- struct{}{}:
	case <-b.ctx.Done():
		return nil, fmt.Errorf("fetch object %s: %w", id, store.ErrClosed)
	}
	defer func() { <-b.dl }()
	key := b.objectKey(id)
	var lastErr error
	// A second attempt after a failed check: the bytes may have been damaged on the way.
	for attempt := 0; attempt < 2; attempt++ {
		f, err := os.CreateTemp(filepath.Join(b.dir, cacheTmp), "fetch-*")
		if err != nil {
			return nil, fmt.Errorf("fetch object %s: %w", id, err)
		}
		size, err := b.downloadTo(b.ctx, key, f)
		if err == nil {
			if err = store.CheckObject(fileObject{f, size}); err != nil {
				err = fmt.Errorf("object %s as downloaded from %s: %w", id, b.c.loc, err)
			}
		}
		if err == nil {
			err = b.cache.adopt(id, f.Name(), size)
		}
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			lastErr = err
			if !errors.Is(err, store.ErrCorrupt) {
				break
			}
			continue
		}
		b.noteRemote(id, size)
		b.c.stats.add(&b.c.stats.objectDownloads, 1)
		b.writeStats()
		return f, nil
	}
	return nil, fmt.Errorf("fetch object %s: %w", id, lastErr)
}

// downloadTo writes the object at key into f (empty) and returns its size. The first GET
// asks for the first part only; an object no larger than that is then complete after one
// request, and the rest of a larger one is fetched in parallel (downloadParts).
func (b *Backend) downloadTo(ctx context.Context, key string, f *os.File) (int64, error) {
	return b.downloadFirst(ctx, key, f, b.c.set.partSize)
}

// downloadFirst is downloadTo with a first GET of first bytes (at least the part size).
func (b *Backend) downloadFirst(ctx context.Context, key string, f *os.File, first int64) (int64, error) {
	var total, got int64
	var etag string
	err := b.c.retry(ctx, "GET "+b.c.name(key), func(ctx context.Context) error {
		var err error
		total, etag, got, err = b.c.getFirst(ctx, key, first, localWriterAt{f})
		return err
	})
	if err != nil {
		if isInvalidRange(err) {
			// An empty object has no first byte to ask for.
			return b.downloadWhole(ctx, key, f)
		}
		return 0, err
	}
	b.c.stats.add(&b.c.stats.objectBytes, got)
	if got < total {
		if err := b.downloadParts(ctx, key, etag, got, total, f); err != nil {
			return 0, err
		}
	}
	if err := f.Truncate(total); err != nil {
		return 0, err
	}
	return total, nil
}

// downloadWhole is the reference download: one GET of the whole object streamed into f.
func (b *Backend) downloadWhole(ctx context.Context, key string, f *os.File) (int64, error) {
	var size int64
	err := b.c.retry(ctx, "GET "+b.c.name(key), func(ctx context.Context) error {
		if err := f.Truncate(0); err != nil {
			return &localError{err}
		}
		var err error
		size, err = b.c.getInto(ctx, key, localWriterAt{f})
		return err
	})
	if err == nil {
		b.c.stats.add(&b.c.stats.objectBytes, size)
	}
	return size, err
}

// downloadParts fetches bytes [start, size) of a large object: parts of PartSize by up to
// four ranged GETs at a time, each written at its offset, all pinned to one ETag so that
// every part comes from the same object.
func (b *Backend) downloadParts(ctx context.Context, key, etag string, start, size int64, f *os.File) error {
	part := b.c.set.partSize
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	offsets := make(chan int64)
	var errMu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range min(4, b.c.set.concurrency) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := range offsets {
				if err := b.c.getRange(ctx, key, etag, off, min(part, size-off), localWriterAt{f}); err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					cancel()
				}
			}
		}()
	}
feed:
	for off := start; off < size; off += part {
		select {
		case offsets <- off:
		case <-ctx.Done():
			break feed
		}
	}
	close(offsets)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// localWriterAt marks the errors of writing a download to local disk, so that the retry
// loop passes them on unchanged instead of retrying them (ENOSPC stays ENOSPC).
type localWriterAt struct{ w io.WriterAt }

func (l localWriterAt) WriteAt(p []byte, off int64) (int, error) {
	n, err := l.w.WriteAt(p, off)
	if err != nil {
		err = &localError{err}
	}
	return n, err
}

// localError marks a local file error inside an S3 retry loop: it is not retried and comes
// out unchanged (ENOSPC stays ENOSPC).
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
