package s3

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/pack"
)

// Packs (store format 3; the bytes are package store/pack, docs/format.md Part I §3.5) are
// kept as PREFIX/packs/<64 hex>, one key per pack, flat: a store holds a few packs per
// version, not one per tensor. They travel as objects do: PutPack queues the file for the
// upload workers (one PUT, or a multipart upload past the part size), SyncObjects waits for
// them, and the uploaded file moves into the object cache. OpenPack serves a cached pack, or
// downloads the whole pack into the cache first (the parallel ranged download of large
// objects) and serves it from there: a reader of a version fetches its packs in a few large
// requests, and every later read of an object in them costs none.
//
// A pack is moved by one request each way up to packWhole bytes, whatever the part size: the
// parallelism is across packs (Concurrency uploads, Concurrency downloads at a time), and a
// version costs one request per pack. Only a larger pack (a large object in a pack of its
// own) goes in parts.
//
// A pack in the cache is checked before a process first serves it, as an object is: its
// table (pack.ReadTrailer: footer, CRC, order, tiling) must be the table of the pack's id,
// and every record's CRC-32C must match its entry. One that fails is dropped and fetched
// again.

var (
	_ store.PackBackend = (*Backend)(nil)
	_ store.PackCache   = (*Backend)(nil)
)

// packsDir is the packs' directory under the store's prefix.
const packsDir = "packs/"

// packWhole bounds the packs moved by one request: the store's pack layer finishes a pack
// once it passed 64 MiB, with objects under 16 MiB in it, so its packs stay under 80 MiB.
const packWhole = 96 << 20

func (b *Backend) packKey(id store.ID) string { return b.c.loc.key(packsDir + id.String()) }

// pendingJobs returns the uploads not yet done, objects and packs; b.mu is held.
func (b *Backend) pendingJobs() []*uploadJob {
	jobs := make([]*uploadJob, 0, len(b.pending)+len(b.packs))
	for _, j := range b.pending {
		jobs = append(jobs, j)
	}
	for _, j := range b.packs {
		jobs = append(jobs, j)
	}
	return jobs
}

// PutPack queues the finished temporary file tmp for upload as pack id, as PutObject does
// an object. The pack is in S3 once SyncObjects returned without error.
func (b *Backend) PutPack(id store.ID, tmp *os.File) error {
	name := tmp.Name()
	if err := tmp.Close(); err != nil {
		os.Remove(name)
		return fmt.Errorf("put pack %s: %w", id, err)
	}
	st, err := os.Stat(name)
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("put pack %s: %w", id, err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		os.Remove(name)
		return fmt.Errorf("put pack %s: %w", id, store.ErrClosed)
	}
	if j := b.packs[id]; j != nil && j.err == nil {
		// A pack's id is the hash of its table: the same records, already on their way.
		b.mu.Unlock()
		os.Remove(name)
		return nil
	}
	dst := filepath.Join(b.dir, cacheUpload, "pack-"+id.String())
	if err := os.Rename(name, dst); err != nil {
		b.mu.Unlock()
		os.Remove(name)
		return fmt.Errorf("put pack %s: %w", id, err)
	}
	job := &uploadJob{id: id, path: dst, size: st.Size(), pack: true}
	b.packs[id] = job
	b.inflight++
	b.mu.Unlock()
	return b.enqueue(job)
}

// packUploaded records a pack's upload: its file moves into the object cache. b.mu is held.
func (b *Backend) packUploaded(job *uploadJob) {
	delete(b.packs, job.id)
	if err := b.cache.adoptKey(packEntry(job.id), job.path, job.size); err != nil {
		os.Remove(job.path) // uploaded: the cache copy is only an optimisation
	}
	b.writeStatsLocked()
}

// OpenPack opens pack id: from its upload file while it waits for its upload, from the
// cache, or else downloaded whole into the cache first. A missing pack is an error wrapping
// fs.ErrNotExist; one whose table is damaged in the bucket, store.ErrCorrupt.
func (b *Backend) OpenPack(id store.ID) (store.ObjectFile, error) {
	b.mu.Lock()
	if j := b.packs[id]; j != nil {
		// Opened under the lock: the upload worker moves the file only while holding it.
		f, err := os.Open(j.path)
		b.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("open pack %s waiting for upload: %w", id, err)
		}
		return fileObject{f, j.size}, nil
	}
	b.mu.Unlock()
	f, size, err := b.fetchPack(id)
	if err != nil {
		return nil, err
	}
	return fileObject{f, size}, nil
}

// openCachedPack opens the cached file of pack id and checks it whole the first time this
// process uses it (checkPack); one that fails is logged and dropped, and ok is false.
func (b *Backend) openCachedPack(id store.ID) (f *os.File, size int64, ok bool) {
	k := packEntry(id)
	f, size, ok = b.cache.openKey(k)
	if !ok || b.cache.isCheckedKey(k) {
		return f, size, ok
	}
	if err := checkPack(id, f, size, true); err != nil {
		f.Close()
		b.cache.removeKey(k)
		b.log.Warn("S3 object cache: a cached pack failed its check; dropped, fetched again from the bucket",
			"pack", id.String(), "file", b.cache.pathOf(k), "err", err)
		return nil, 0, false
	}
	b.cache.markCheckedKey(k)
	return f, size, true
}

// fetchPack returns an open descriptor of the whole pack id and its size, downloading it
// into the cache unless it is there. Concurrent fetches of one pack download it once.
func (b *Backend) fetchPack(id store.ID) (*os.File, int64, error) {
	for range 3 {
		if f, size, ok := b.openCachedPack(id); ok {
			b.c.stats.add(&b.c.stats.cacheHits, 1)
			return f, size, nil
		}
		b.mu.Lock()
		fl, running := b.pflights[id]
		if !running {
			fl = &fetchFlight{done: make(chan struct{})}
			b.pflights[id] = fl
		}
		b.mu.Unlock()
		if running {
			<-fl.done
			if fl.err != nil {
				return nil, 0, fl.err
			}
			continue // in the cache now, unless it was evicted at once
		}
		f, size, err := b.downloadPack(id)
		b.mu.Lock()
		delete(b.pflights, id)
		b.mu.Unlock()
		fl.err = err
		close(fl.done)
		return f, size, err
	}
	return nil, 0, fmt.Errorf("pack %s: evicted as soon as it was fetched (the object cache is smaller than the packs being read)", id)
}

// downloadPack fetches pack id whole into the cache and checks it (checkPack). A pack whose
// table fails twice is damaged in the bucket: store.ErrCorrupt. A pack whose table is right
// but a record fails twice is kept all the same: the store checks each object's CRC-32C as
// it reads it and names the damaged object alone, while the others stay readable.
func (b *Backend) downloadPack(id store.ID) (*os.File, int64, error) {
	select {
	case b.dl <- struct{}{}:
	case <-b.ctx.Done():
		return nil, 0, fmt.Errorf("fetch pack %s: %w", id, store.ErrClosed)
	}
	defer func() { <-b.dl }()
	key := b.packKey(id)
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		f, err := os.CreateTemp(filepath.Join(b.dir, cacheTmp), "fetch-*")
		if err != nil {
			return nil, 0, fmt.Errorf("fetch pack %s: %w", id, err)
		}
		size, err := b.downloadFirst(b.ctx, key, f, max(b.c.set.partSize, b.packWhole))
		if err == nil {
			if err = checkPack(id, f, size, attempt == 0); err != nil {
				err = fmt.Errorf("pack %s as downloaded from %s: %w", id, b.c.loc, err)
			}
		}
		if err == nil {
			err = b.cache.adoptKey(packEntry(id), f.Name(), size)
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
		b.c.stats.add(&b.c.stats.packDownloads, 1)
		b.writeStats()
		return f, size, nil
	}
	return nil, 0, fmt.Errorf("fetch pack %s: %w", id, lastErr)
}

// checkPack checks the pack file f of size bytes as pack id: its table (pack.ReadTrailer)
// must hash to id and, with records, every record's CRC-32C must match its entry and its own
// trailer. Damage wraps store.ErrCorrupt.
func checkPack(id store.ID, f *os.File, size int64, records bool) error {
	entries, got, err := pack.ReadTrailer(f, size)
	if err != nil {
		if errors.Is(err, pack.ErrCorrupt) || errors.Is(err, pack.ErrUnsupported) {
			return fmt.Errorf("%w: %w", err, store.ErrCorrupt)
		}
		return err
	}
	if got != pack.ID(id) {
		return fmt.Errorf("file holds the table of pack %s: %w", store.ID(got), store.ErrCorrupt)
	}
	if !records {
		return nil
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Offset < entries[j].Offset })
	buf := make([]byte, 1<<20)
	for _, e := range entries {
		var crc uint32
		body := e.Length - 4
		for off := int64(0); off < body; {
			n := min(int64(len(buf)), body-off)
			if _, err := f.ReadAt(buf[:n], e.Offset+off); err != nil {
				return fmt.Errorf("read pack record: %w", err)
			}
			crc = crc32.Update(crc, castagnoli, buf[:n])
			off += n
		}
		var tr [4]byte
		if _, err := f.ReadAt(tr[:], e.Offset+body); err != nil {
			return fmt.Errorf("read pack record: %w", err)
		}
		if crc != e.CRC || binary.LittleEndian.Uint32(tr[:]) != e.CRC {
			return fmt.Errorf("record of object %s at %d: CRC-32C %08x, table says %08x: %w", store.ID(e.ID), e.Offset, crc, e.CRC, store.ErrCorrupt)
		}
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// StatPack returns the size of pack id: of its upload file while it waits, else as S3 says
// (a HEAD: gc in another process may have removed it).
func (b *Backend) StatPack(id store.ID) (int64, error) {
	b.mu.Lock()
	if j := b.packs[id]; j != nil {
		b.mu.Unlock()
		return j.size, nil
	}
	b.mu.Unlock()
	size, _, err := b.c.stat(b.ctx, b.packKey(id))
	if err != nil {
		return 0, fmt.Errorf("stat pack %s: %w", id, err)
	}
	return size, nil
}

// ListPacks lists PREFIX/packs/ (one LIST request per 1,000 packs).
func (b *Backend) ListPacks(fn func(id store.ID, size int64) error) error {
	err := b.c.list(b.ctx, packsDir, func(rel string, size int64) error {
		id, err := store.ParseID(strings.TrimPrefix(rel, packsDir))
		if err != nil {
			return nil // not a pack's key; the layout has nothing else here
		}
		return fn(id, size)
	})
	if err != nil {
		return fmt.Errorf("list packs: %w", err)
	}
	return nil
}

// DeletePack removes pack id from the bucket (under the writer's lease, as objects) and from
// the cache; a missing one is not an error.
func (b *Backend) DeletePack(id store.ID) error {
	if err := b.fence(false); err != nil {
		return fmt.Errorf("delete pack %s: %w", id, err)
	}
	if err := b.c.remove(b.ctx, b.packKey(id)); err != nil {
		return fmt.Errorf("delete pack %s: %w", id, err)
	}
	b.cache.removeKey(packEntry(id))
	return nil
}

// IsPackCached reports whether pack id is in the object cache or waiting for its upload:
// opening it costs no request.
func (b *Backend) IsPackCached(id store.ID) bool {
	b.mu.Lock()
	_, pending := b.packs[id]
	b.mu.Unlock()
	_, cached := b.cache.sizeKey(packEntry(id))
	return pending || cached
}

// PrefetchPacks downloads packs into the cache, Concurrency at a time (each takes a download
// token), and returns the first error after all have ended. A pack missing from the bucket
// or damaged there is logged and skipped, as Prefetch skips such an object: reads that need
// it fail as damaged, and the other versions stay readable.
func (b *Backend) PrefetchPacks(ids []store.ID) error {
	return b.prefetchEach(ids, "packs", "a pack", func(id store.ID) (io.Closer, error) {
		f, _, err := b.fetchPack(id)
		return f, err
	})
}
