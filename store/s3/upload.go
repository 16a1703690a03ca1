package s3

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/weightfs/weightfs/store"
)

// uploadJob is one object on its way to S3. Its file stays in CACHE/upload/ until the PUT
// succeeded (reads are served from it meanwhile), then moves into the object cache.
type uploadJob struct {
	id   store.ID
	path string
	size int64
	err  error // the last attempt failed: SyncObjects queues it again
	pack bool  // a pack (packs.go), not an object
}

// PutObject queues the finished temporary file tmp for upload as object id. It blocks while
// the queue is full (2 x Concurrency objects), which bounds what waits on local disk. The
// object is in S3 once SyncObjects returned without error.
func (b *Backend) PutObject(id store.ID, tmp *os.File) error {
	name := tmp.Name()
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("put object %s: %w", id, err)
	}
	st, err := os.Stat(name)
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("put object %s: %w", id, err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		os.Remove(name)
		return fmt.Errorf("put object %s: %w", id, store.ErrClosed)
	}
	if j := b.pending[id]; j != nil && j.err == nil {
		// The same content is already on its way (an identity names one content).
		b.mu.Unlock()
		os.Remove(name)
		return nil
	}
	dst := filepath.Join(b.dir, cacheUpload, id.String())
	if err := os.Rename(name, dst); err != nil {
		b.mu.Unlock()
		os.Remove(name)
		return fmt.Errorf("put object %s: %w", id, err)
	}
	job := &uploadJob{id: id, path: dst, size: st.Size()}
	b.pending[id] = job
	b.inflight++
	b.mu.Unlock()
	return b.enqueue(job)
}

func (b *Backend) enqueue(job *uploadJob) error {
	select {
	case b.queue <- job:
		return nil
	case <-b.ctx.Done():
		b.finishJob(job, store.ErrClosed)
		return fmt.Errorf("put object %s: %w", job.id, store.ErrClosed)
	}
}

func (b *Backend) uploadWorker() {
	defer b.wg.Done()
	for {
		select {
		case <-b.ctx.Done():
			// Jobs still queued belong to no sealed version: account for them so that no
			// SyncObjects waits for them forever.
			for {
				select {
				case job := <-b.queue:
					b.finishJob(job, store.ErrClosed)
				default:
					return
				}
			}
		case job := <-b.queue:
			b.finishJob(job, b.upload(job))
		}
	}
}

func (b *Backend) upload(job *uploadJob) error {
	what, key := "object", b.objectKey(job.id)
	if job.pack {
		what, key = "pack", b.packKey(job.id)
	}
	f, err := os.Open(job.path)
	if err != nil {
		return fmt.Errorf("upload %s %s: %w", what, job.id, err)
	}
	defer f.Close()
	part := b.c.set.partSize
	if job.pack && job.size <= b.packWhole {
		part = b.packWhole // one PUT (packs.go)
	}
	if err := b.c.putFileParts(b.ctx, key, f, job.size, part); err != nil {
		return fmt.Errorf("upload %s %s: %w", what, job.id, err)
	}
	if job.pack {
		b.c.stats.add(&b.c.stats.packUploads, 1)
		b.c.stats.add(&b.c.stats.packUploadBytes, job.size)
		return nil
	}
	b.c.stats.add(&b.c.stats.objectUploads, 1)
	b.c.stats.add(&b.c.stats.objectUploadBytes, job.size)
	return nil
}

// finishJob records the end of an upload: on success the object is in S3 and its file moves
// into the object cache; on failure it waits for the next SyncObjects.
func (b *Backend) finishJob(job *uploadJob, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inflight--
	defer b.cond.Broadcast()
	if err != nil {
		job.err = err
		return
	}
	if job.pack {
		b.packUploaded(job)
		return
	}
	delete(b.pending, job.id)
	b.remote[job.id] = job.size
	if aerr := b.cache.adopt(job.id, job.path, job.size); aerr != nil {
		os.Remove(job.path) // uploaded: the cache copy is only an optimisation
	}
	b.writeStatsLocked()
}

// writeStatsLocked writes the stats file; b.mu is held, which the counters do not need.
func (b *Backend) writeStatsLocked() { b.c.stats.writeFile(b.dir, b.Stats()) }

// SyncObjects waits until every object put so far is in S3. Uploads that failed (S3 was
// unreachable for longer than RetryFor) are tried again first; if any still fails, the error
// says how many and why, and a later call tries them again.
func (b *Backend) SyncObjects() error {
	b.mu.Lock()
	var again []*uploadJob
	for _, j := range b.pendingJobs() {
		if j.err != nil {
			j.err = nil
			b.inflight++
			again = append(again, j)
		}
	}
	b.mu.Unlock()
	for _, j := range again {
		if err := b.enqueue(j); err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.inflight > 0 && !b.closed {
		b.cond.Wait()
	}
	var errs []error
	for _, j := range b.pendingJobs() {
		if j.err != nil {
			errs = append(errs, j.err)
		}
	}
	switch {
	case len(errs) > 0:
		return fmt.Errorf("%d of the version's objects or packs are not in S3 yet: %w", len(errs), errs[0])
	case b.closed && b.inflight > 0:
		return fmt.Errorf("sync objects: %w", store.ErrClosed)
	}
	return nil
}
