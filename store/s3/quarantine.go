package s3

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weightfs/weightfs/store"
)

// The quarantine of an S3 store (store.Quarantiner, for weightfs verify --repair): what the
// local store moves into STORE/quarantine/ is copied to PREFIX/quarantine/ (manifests as
// vNNNNNN, objects as objects/<id>) and then deleted from its place. A crash between the two
// leaves both; the next repair finds the damage again and does it again. Listing
// PREFIX/quarantine/ tells every process which numbers are taken for good.

func (b *Backend) quarantineKey(name string) string { return b.c.loc.key("quarantine/" + name) }

// QuarantineManifestPath is where QuarantineManifest moves version v's manifest.
func (b *Backend) QuarantineManifestPath(v uint64) string {
	return b.c.name(b.quarantineKey(store.ManifestName(v)))
}

// QuarantineObjectPath is where QuarantineObject moves object id.
func (b *Backend) QuarantineObjectPath(id store.ID) string {
	return b.c.name(b.quarantineKey("objects/" + id.String()))
}

// QuarantineManifest copies version v's manifest, its bytes as they are, into quarantine/
// and deletes it from versions/.
func (b *Backend) QuarantineManifest(v uint64) (string, error) {
	if err := b.fence(false); err != nil {
		return "", fmt.Errorf("quarantine version %d: %w", v, err)
	}
	data, _, err := b.c.getBytes(b.ctx, b.manifestKey(v), nil)
	if err != nil {
		return "", fmt.Errorf("quarantine version %d: read its manifest: %w", v, err)
	}
	if _, err := b.c.putBytes(b.ctx, b.quarantineKey(store.ManifestName(v)), data, putCond{}); err != nil {
		return "", fmt.Errorf("quarantine version %d: %w", v, err)
	}
	if err := b.DeleteManifest(v); err != nil {
		return "", fmt.Errorf("quarantine version %d: %w", v, err)
	}
	return b.QuarantineManifestPath(v), nil
}

// QuarantineObject copies object id, its bytes as they are, into quarantine/objects/ and
// deletes it from objects/ (and from the local cache).
func (b *Backend) QuarantineObject(id store.ID) (string, error) {
	if err := b.fence(false); err != nil {
		return "", fmt.Errorf("quarantine object %s: %w", id, err)
	}
	tmp, err := os.CreateTemp(filepath.Join(b.dir, cacheTmp), "quarantine-*")
	if err != nil {
		return "", fmt.Errorf("quarantine object %s: %w", id, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	size, err := b.c.getInto(b.ctx, b.objectKey(id), tmp)
	if err != nil {
		return "", fmt.Errorf("quarantine object %s: read it: %w", id, err)
	}
	if err := b.c.putFile(b.ctx, b.quarantineKey("objects/"+id.String()), tmp, size); err != nil {
		return "", fmt.Errorf("quarantine object %s: %w", id, err)
	}
	if err := b.DeleteObject(id); err != nil {
		return "", fmt.Errorf("quarantine object %s: %w", id, err)
	}
	return b.QuarantineObjectPath(id), nil
}

// ListQuarantined lists the version numbers whose manifests are in quarantine/, ascending.
func (b *Backend) ListQuarantined() ([]uint64, error) {
	var vs []uint64
	err := b.c.list(b.ctx, "quarantine/", func(rel string, _ int64) error {
		if v, ok := store.ParseManifestName(strings.TrimPrefix(rel, "quarantine/")); ok {
			vs = append(vs, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list quarantine: %w", err)
	}
	slices.Sort(vs)
	return slices.Compact(vs), nil
}

var _ store.Quarantiner = (*Backend)(nil)
