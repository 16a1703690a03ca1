package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// s3Setup resolves the options of the store at url and makes its client.
func s3Setup(url string, opts Options) (*s3Client, error) {
	loc, err := ParseS3URL(url)
	if err != nil {
		return nil, err
	}
	set, err := opts.S3.resolve(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", loc, err)
	}
	return newS3Client(loc, set, logfAt(opts.Logger, slog.LevelWarn))
}

// openS3 is Open for s3://bucket/prefix: the format file is read from the bucket, a writer
// takes the lease, and the local state (index, materialized copy, object cache) lives in the
// cache directory: Options.CacheDir, else for a writer a directory per store under the user
// cache dir (kept, so a restarted writer finds its materialized copy), else a fresh
// per-process directory (removed by Close).
func openS3(url string, opts Options) (*Store, error) {
	c, err := s3Setup(url, opts)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	format, _, err := c.getBytes(ctx, c.loc.key(formatFileName), nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open store %s: no %s there: %w (create one with 'weightfs init %s')", c.describe(), formatFileName, ErrNotAStore, c.loc)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", c.describe(), err)
	}
	if err := checkFormatFile(format); err != nil {
		return nil, fmt.Errorf("open store %s: %w", c.describe(), err)
	}
	if !opts.ReadOnly && opts.CacheDir == "" {
		if opts.CacheDir, err = defaultS3WriterCache(c); err != nil {
			return nil, err
		}
	}
	s := newBareStore(c.loc.String(), opts, nil)
	ok := false
	defer func() {
		if !ok {
			s.shutdown()
		}
	}()
	var ls *lease
	if !s.readOnly {
		// The lease comes first: a second writer must not touch the first one's cache.
		if ls, err = acquireLease(ctx, c, c.logf, time.Now); err != nil {
			return nil, fmt.Errorf("open store %s for writing: %w", c.loc, err)
		}
		s.lock = &writerLock{lease: ls}
	}
	if err := s.setupCacheDir(); err != nil {
		return nil, err
	}
	if err := claimS3Cache(s.cacheDir, c); err != nil {
		return nil, err
	}
	be, err := newS3Backend(c, s.cacheDir, !s.readOnly, s.readOnly && opts.Materialize, c.logf)
	if err != nil {
		return nil, err
	}
	be.lease = ls
	s.be = be
	if !s.readOnly {
		if err := be.CleanTemp(); err != nil {
			return nil, err
		}
	}
	if err := s.finishOpen(); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// defaultS3WriterCache is UserCacheDir/weightfs/s3-writer-<hash of endpoint and store>.
func defaultS3WriterCache(c *s3Client) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	sum := sha256.Sum256([]byte(c.set.endpointURL() + "\n" + c.loc.String()))
	dir := filepath.Join(base, "weightfs", "s3-writer-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, cacheDirPerm); err != nil {
		return "", fmt.Errorf("create cache directory: %w", err)
	}
	return dir, nil
}

// s3Origin records which store a cache directory holds state of.
type s3Origin struct {
	Store    string `json:"store"`
	Endpoint string `json:"endpoint"`
}

// claimS3Cache marks dir as the cache of the store c talks to, or refuses a directory that
// holds another store's state (its index and objects would be wrong here).
func claimS3Cache(dir string, c *s3Client) error {
	want := s3Origin{Store: c.loc.String(), Endpoint: c.set.endpointURL()}
	p := filepath.Join(dir, "s3-origin.json")
	data, err := os.ReadFile(p)
	if err == nil {
		var have s3Origin
		if json.Unmarshal(data, &have) != nil || have != want {
			return fmt.Errorf("cache directory %s holds the state of another store (%s); give each store its own cache directory", dir, string(data))
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cache directory: %w", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() == "index.db" || e.Name() == "materialized" {
			return fmt.Errorf("cache directory %s holds the state of a store that is not %s; give each store its own cache directory", dir, c.loc)
		}
	}
	data, _ = json.MarshalIndent(want, "", "  ")
	if err := os.WriteFile(p, append(data, '\n'), cacheFilePerm); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	return nil
}

// InitS3 creates an empty store at s3://bucket/prefix: the bucket if it does not exist yet,
// then the format file, created only if absent. The prefix must hold no object.
func InitS3(url string, o S3Options) error {
	c, err := s3Setup(url, Options{S3: o})
	if err != nil {
		return err
	}
	ctx := context.Background()
	exists, err := c.bucketExists(ctx)
	if err != nil {
		return fmt.Errorf("init store %s: %w", c.describe(), err)
	}
	if !exists {
		if err := c.makeBucket(ctx); err != nil {
			return fmt.Errorf("init store %s: create bucket: %w", c.describe(), err)
		}
	}
	errNotEmpty := errors.New("not empty")
	var first string
	err = c.list(ctx, "", func(rel string, _ int64) error {
		first = rel
		return errNotEmpty
	})
	if errors.Is(err, errNotEmpty) {
		return fmt.Errorf("init store %s: the prefix is not empty (it holds %s)", c.describe(), first)
	}
	if err != nil {
		return fmt.Errorf("init store %s: %w", c.describe(), err)
	}
	_, err = c.putBytes(ctx, c.loc.key(formatFileName), encodeFormatFile(), putCond{ifNoneMatch: true})
	if isPrecondition(err) {
		return fmt.Errorf("init store %s: another init created the store meanwhile", c.describe())
	}
	if err != nil {
		return fmt.Errorf("init store %s: %w", c.describe(), err)
	}
	return nil
}

// ShowLease describes who holds the writer's lock of a store. For a local store it reports
// whether a process holds the flock (Owner is then empty: flock does not say who).
func ShowLease(path string, opts Options) (LeaseInfo, error) {
	if !IsS3URL(path) {
		return localLockInfo(path)
	}
	c, err := s3Setup(path, opts)
	if err != nil {
		return LeaseInfo{}, err
	}
	rec, _, err := readLease(context.Background(), c)
	if errors.Is(err, fs.ErrNotExist) {
		return LeaseInfo{}, nil
	}
	if err != nil {
		return LeaseInfo{}, err
	}
	return rec.info(time.Now()), nil
}

// BreakLease deletes the writer's lease of an S3 store, whoever holds it, and returns what
// it held. Use it only when the holder is dead: a live holder finds out at its next renewal
// (within a third of the TTL) and can no longer seal. A local store's flock needs no
// breaking: the kernel drops it when its holder exits.
func BreakLease(path string, opts Options) (LeaseInfo, error) {
	if !IsS3URL(path) {
		return LeaseInfo{}, fmt.Errorf("%s is a local store: its writer lock is an flock, which the kernel releases when the writer exits; there is nothing to break", path)
	}
	c, err := s3Setup(path, opts)
	if err != nil {
		return LeaseInfo{}, err
	}
	ctx := context.Background()
	info := LeaseInfo{}
	data, _, err := c.getBytes(ctx, c.loc.key(leaseKey), nil)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return LeaseInfo{}, nil
	case err != nil:
		return LeaseInfo{}, err
	}
	if rec, derr := decodeLease(data); derr == nil {
		info = rec.info(time.Now())
	} else {
		info = LeaseInfo{Held: true, Owner: fmt.Sprintf("(unreadable lease record: %v)", derr)}
	}
	if err := c.remove(ctx, c.loc.key(leaseKey)); err != nil {
		return info, fmt.Errorf("break the writer lease of %s: %w", c.loc, err)
	}
	return info, nil
}

// localLockInfo tries the flock of a local store without keeping it.
func localLockInfo(path string) (LeaseInfo, error) {
	f, err := os.OpenFile(filepath.Join(path, "lock"), os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return LeaseInfo{}, nil
	}
	if err != nil {
		return LeaseInfo{}, fmt.Errorf("writer lock of %s: %w", path, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return LeaseInfo{Held: true}, nil
		}
		return LeaseInfo{}, fmt.Errorf("writer lock of %s: %w", path, err)
	}
	return LeaseInfo{}, nil
}

// S3Stats returns the traffic counters of an S3 store; ok is false for a local store.
func (s *Store) S3Stats() (S3Stats, bool) {
	if b, ok := s.be.(*s3Backend); ok {
		return b.stats(), true
	}
	return S3Stats{}, false
}

// StagingDir is where a read-write mount keeps the bytes of open versions: CACHE/staging, on
// the cache directory's disk (STORE/cache/staging for a local writer with the default
// cache). A store in S3 has no local directory of its own, so this is the one place for it.
func (s *Store) StagingDir() (string, error) { return filepath.Join(s.cacheDir, "staging"), nil }
