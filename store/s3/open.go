package s3

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
	"time"

	"github.com/weightfs/weightfs/store"
)

// setup resolves the configuration of the store at url and makes its client.
func setup(url string, cfg Config, log *slog.Logger) (*client, error) {
	loc, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	set, err := cfg.resolve(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", loc, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return newClient(loc, set, log)
}

// Open opens the store at s3://bucket/prefix: the format file is read from the bucket, a
// writer takes the lease, and the local state (index, materialized copy, object cache) lives
// in the cache directory: opts.CacheDir, else for a writer a directory per store under the
// user cache dir (kept, so a restarted writer finds its materialized copy), else a fresh
// per-process directory (removed by Close).
func Open(url string, cfg Config, opts store.Options) (*store.Store, error) {
	c, err := setup(url, cfg, opts.Logger)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	format, formatTag, err := c.getBytes(ctx, c.loc.key(store.FormatFileName), nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open store %s: no %s there: %w (create one with 'weightfs init %s')", c.describe(), store.FormatFileName, store.ErrNotAStore, c.loc)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", c.describe(), err)
	}
	version, err := store.FormatVersion(format)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", c.describe(), err)
	}
	o := store.Opening{Root: c.loc.String(), Format: version}
	var ls *lease
	if !opts.ReadOnly {
		if opts.CacheDir == "" {
			if o.WriterCacheDir, err = defaultWriterCache(c); err != nil {
				return nil, err
			}
		}
		// The lease comes first: a second writer must not touch the first one's cache.
		if ls, err = acquireLease(ctx, c, c.log, time.Now); err != nil {
			return nil, fmt.Errorf("open store %s for writing: %w", c.loc, err)
		}
		o.Lock = leaseCloser{ls}
		// Replaces the format file read above, and no other (store.Opening.UpgradeFormat).
		o.UpgradeFormat = func(data []byte) error {
			_, err := c.putBytes(ctx, c.loc.key(store.FormatFileName), data, putCond{ifMatch: formatTag})
			return err
		}
	}
	o.NewBackend = func(cacheDir string) (store.Backend, error) {
		if err := claimCache(cacheDir, c); err != nil {
			return nil, err
		}
		return newBackend(c, cacheDir, !opts.ReadOnly, ls, c.log)
	}
	return store.OpenBackend(o, opts)
}

// leaseCloser hands the lease to the store as its writer's lock: Close releases it.
type leaseCloser struct{ l *lease }

func (c leaseCloser) Close() error { return c.l.release() }

// defaultWriterCache is UserCacheDir/weightfs/s3-writer-<hash of endpoint and store>.
func defaultWriterCache(c *client) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	sum := sha256.Sum256([]byte(c.set.endpointURL() + "\n" + c.loc.String()))
	dir := filepath.Join(base, "weightfs", "s3-writer-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return "", fmt.Errorf("create cache directory: %w", err)
	}
	return dir, nil
}

// origin records which store a cache directory holds state of.
type origin struct {
	Store    string `json:"store"`
	Endpoint string `json:"endpoint"`
}

// claimCache marks dir as the cache of the store c talks to, or refuses a directory that
// holds another store's state (its index and objects would be wrong here).
func claimCache(dir string, c *client) error {
	want := origin{Store: c.loc.String(), Endpoint: c.set.endpointURL()}
	p := filepath.Join(dir, "s3-origin.json")
	data, err := os.ReadFile(p)
	if err == nil {
		var have origin
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
	if err := os.WriteFile(p, append(data, '\n'), filePerm); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	return nil
}

// Init creates an empty store at s3://bucket/prefix: the bucket if it does not exist yet,
// then the format file, created only if absent. The prefix must hold no object.
func Init(url string, cfg Config, log *slog.Logger) error {
	c, err := setup(url, cfg, log)
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
	_, err = c.putBytes(ctx, c.loc.key(store.FormatFileName), store.FormatFile(), putCond{ifNoneMatch: true})
	if isPrecondition(err) {
		return fmt.Errorf("init store %s: another init created the store meanwhile", c.describe())
	}
	if err != nil {
		return fmt.Errorf("init store %s: %w", c.describe(), err)
	}
	return nil
}

// ShowLease describes who holds the writer's lease of the store at url.
func ShowLease(url string, cfg Config, log *slog.Logger) (LeaseInfo, error) {
	c, err := setup(url, cfg, log)
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

// BreakLease deletes the writer's lease of the store at url, whoever holds it, and returns
// what it held. Use it only when the holder is dead: a live holder finds out at its next
// renewal (within a third of the TTL) and can no longer seal.
func BreakLease(url string, cfg Config, log *slog.Logger) (LeaseInfo, error) {
	c, err := setup(url, cfg, log)
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
