package s3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/weightfs/weightfs/store"
)

// A writer group's records (store/group.go; docs/format.md Part I §9; records.go) are small objects
// PREFIX/groups/NAME/vNNNNNN/rank-R.part and .open, each written by one PUT (a PUT is atomic:
// a reader gets the old object or the new one). A rank writes its own records and objects,
// never a manifest: it takes no lease (manifests and deletes of objects stay fenced by the
// writer's), and its process is the only one that should open the store as that rank.

// groupsDir is the records' directory under the store's prefix.
const groupsDir = "groups/"

var _ store.RemoteStat = (*Backend)(nil)

// StatRemote asks S3 for an object (a HEAD): the writer's StatObject answers from its one
// listing and its own puts, which do not see a rank's uploads.
func (b *Backend) StatRemote(id store.ID) (int64, error) {
	size, _, err := b.c.stat(b.ctx, b.objectKey(id))
	if err != nil {
		return 0, fmt.Errorf("stat object %s: %w", id, err)
	}
	b.noteRemote(id, size)
	return size, nil
}

// OpenRank opens the store at s3://bucket/prefix as rank r of a writer group: it uploads
// objects and its part records and takes no lease. Its cache directory (opts.CacheDir, else
// one per store, group and rank under the user cache dir, kept across runs) holds its index,
// its materialized copy of its own files and its object cache.
func OpenRank(url string, cfg Config, r store.Rank, opts store.Options) (*store.Store, error) {
	c, err := setup(url, cfg, opts.Logger)
	if err != nil {
		return nil, err
	}
	format, _, err := c.getBytes(context.Background(), c.loc.key(store.FormatFileName), nil)
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
	if opts.CacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		sum := sha256.Sum256([]byte(c.set.endpointURL() + "\n" + c.loc.String()))
		opts.CacheDir = filepath.Join(base, "weightfs", fmt.Sprintf("s3-rank-%s-%s-%d", hex.EncodeToString(sum[:8]), r.Group, r.Rank))
		if err := os.MkdirAll(opts.CacheDir, dirPerm); err != nil {
			return nil, fmt.Errorf("create cache directory: %w", err)
		}
	}
	o := store.Opening{Root: c.loc.String(), Format: version, NewBackend: func(cacheDir string) (store.Backend, error) {
		if err := claimCache(cacheDir, c); err != nil {
			return nil, err
		}
		b, err := newBackend(c, cacheDir, false, nil, c.log)
		if err != nil {
			return nil, err
		}
		// Uploads of a run that died are of no part (its part is written again).
		if err := b.CleanTemp(); err != nil {
			return nil, err
		}
		b.startUploads()
		return b, nil
	}}
	return store.OpenRankBackend(o, r, opts)
}
