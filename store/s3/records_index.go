package s3

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/pack"
)

// Pack indexes (store format 3; the bytes are package store/pack, docs/format.md Part I
// §3.6) are records of kind store.RecordIndex, each the object PREFIX/index/NAME, NAME as
// pack.Name makes it (sequence number and a hash of the bytes). They are immutable: a name is
// written once, with one content, and removed only by gc once a consolidated index replaced
// it. So a process keeps each index it wrote or read in CACHE/index/NAME and serves it from
// there, as it serves manifests: checked (pack.DecodeIndex, and the sequence number its name
// carries) before each use, fetched again if it fails. A listing of index/ is the truth of
// which indexes exist: cached ones it lacks (gc consolidated them) are dropped.
//
// The writer puts an index under its lease (refused once it is lost, as every write of the
// writer is); a rank of a writer group, which holds no lease, puts its own indexes as it puts
// its objects and packs. Deletes (gc's) are the writer's alone.

const (
	indexDir     = "index/" // under the store's prefix
	cacheIndexes = "index"  // in the cache directory
)

func (b *Backend) indexCachePath(name string) string {
	return filepath.Join(b.dir, cacheIndexes, name)
}

// putIndex writes index record name (at key) by one PUT: durable in S3 when it returns.
func (b *Backend) putIndex(key, name string, data []byte) error {
	if b.lease != nil {
		if err := b.fence(false); err != nil {
			return fmt.Errorf("write %s: %w", recordWhat(store.RecordIndex, name), err)
		}
	}
	if _, err := b.c.putBytes(b.ctx, key, data, putCond{}); err != nil {
		return fmt.Errorf("write %s: %w", recordWhat(store.RecordIndex, name), err)
	}
	b.cacheFile(b.indexCachePath(name), data)
	return nil
}

// checkIndex checks index bytes as the store will (pack.DecodeIndex) and that they carry the
// sequence number of their name.
func checkIndex(name string, data []byte) error {
	x, err := pack.DecodeIndex(data)
	if err != nil {
		return err
	}
	if seq, _ := pack.ParseName(name); seq != x.Seq {
		return fmt.Errorf("holds sequence number %d: %w", x.Seq, pack.ErrCorrupt)
	}
	return nil
}

// getIndex returns index record name: the cached copy if it passes checkIndex, else the
// bucket's (cached when it passes; bytes that do not are returned as they are, for the store
// to report as damage).
func (b *Backend) getIndex(key, name string) ([]byte, error) {
	p := b.indexCachePath(name)
	if data, err := os.ReadFile(p); err == nil {
		err := checkIndex(name, data)
		if err == nil {
			return data, nil
		}
		os.Remove(p)
		b.log.Warn("S3 index cache: a cached pack index failed its check; dropped, fetched again from the bucket",
			"index", name, "file", p, "err", err)
	}
	data, _, err := b.c.getBytes(b.ctx, key, nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", recordWhat(store.RecordIndex, name), err)
	}
	b.c.stats.add(&b.c.stats.indexDownloads, 1)
	if checkIndex(name, data) == nil {
		b.cacheFile(p, data)
	}
	b.writeStats()
	return data, nil
}

// listIndexes lists PREFIX/index/ (one LIST request per 1,000 indexes) and drops the cached
// indexes the bucket no longer holds.
func (b *Backend) listIndexes() ([]string, error) {
	var names []string
	err := b.c.list(b.ctx, indexDir, func(rel string, _ int64) error {
		name := strings.TrimPrefix(rel, indexDir)
		if _, ok := pack.ParseName(name); ok {
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list index records: %w", err)
	}
	listed := make(map[string]bool, len(names))
	for _, n := range names {
		listed[n] = true
	}
	entries, _ := os.ReadDir(filepath.Join(b.dir, cacheIndexes))
	for _, e := range entries {
		if !listed[e.Name()] {
			os.RemoveAll(filepath.Join(b.dir, cacheIndexes, e.Name()))
		}
	}
	return names, nil
}

// cacheFile writes data to the cache file p by a temporary file and a rename (a reader
// never sees half of it); a failure only costs a download later.
func (b *Backend) cacheFile(p string, data []byte) {
	tmp, err := os.CreateTemp(filepath.Join(b.dir, cacheTmp), "record-*")
	if err != nil {
		return
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}
