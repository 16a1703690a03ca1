package s3

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/weightfs/weightfs/store/format"
)

// The manifests this process has read from the bucket, written to it or checked in full: a
// cached manifest of one of them is served once its own CRC-32C holds and its trailer (that
// CRC) is the one remembered for its version, without decoding its JSON again. A read-only
// mount reads a new version's manifest from the cache several times in a catch-up (the
// listing, the parse), and decoding a MoE manifest of 20,000 tensors for its summary took
// about as long as a third of parsing it whole (docs/benchmarks.md, figure moe). What the
// full check (store.CheckCachedManifest) guards against still fails here: a damaged file
// fails its CRC, and another version's manifest under this name, or one left by an earlier
// process, has no remembered trailer or another one; both get the full check, and fail it
// or are remembered from then on.
type checkedManifests struct {
	mu  sync.Mutex
	crc map[uint64]uint32 // version -> the CRC-32C trailer of its manifest's bytes

	fullChecks atomic.Int64 // cached manifests checked in full (tests)
}

// note remembers data as version v's manifest: bytes the bucket served or this writer put.
func (c *checkedManifests) note(v uint64, data []byte) {
	if len(data) < 4 {
		return
	}
	c.mu.Lock()
	if c.crc == nil {
		c.crc = map[uint64]uint32{}
	}
	c.crc[v] = binary.LittleEndian.Uint32(data[len(data)-4:])
	c.mu.Unlock()
}

// forget drops version v (its manifest was deleted, or the cache emptied).
func (c *checkedManifests) forget(v uint64) {
	c.mu.Lock()
	delete(c.crc, v)
	c.mu.Unlock()
}

// holds reports whether data, read from the cache as version v's manifest, is the manifest
// remembered for v: its magic, format and length right, its CRC-32C right, and that CRC the
// one remembered.
func (c *checkedManifests) holds(v uint64, data []byte) bool {
	c.mu.Lock()
	want, ok := c.crc[v]
	c.mu.Unlock()
	if !ok || len(data) < 4 || binary.LittleEndian.Uint32(data[len(data)-4:]) != want {
		return false
	}
	_, err := format.ManifestBody(data)
	return err == nil
}
