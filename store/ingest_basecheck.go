package store

import (
	"crypto/sha256"
	"hash"
	"hash/crc32"
	"sync"

	"github.com/zeebo/xxh3"
)

// contentCRCs remembers the CRC-32C of the content of objects, computed in the same pass as
// their SHA-256 (as a stream or the batch path receives a tensor's bytes). The next version
// is diffed against those tensors, read from the materialized copy, and the bytes read must
// be checked (a damaged copy would give wrong deltas forever): checking them against the
// CRC costs a tenth of hashing them again with SHA-256. A base whose CRC is not known (after
// a restart, say) is checked with SHA-256. The CRC catches accidental damage, which is what
// the check is for; the copy is not a security boundary (it is the node's own cache).
type contentCRCs struct {
	mu   sync.Mutex
	byID map[ID]uint32
}

// maxCRCs bounds what contentCRCs remembers (36 MiB): a store whose versions keep being
// aborted would otherwise leave the CRCs of their tensors behind for ever.
const maxCRCs = 1 << 20

func (c *contentCRCs) note(id ID, crc uint32) {
	c.mu.Lock()
	if c.byID == nil || len(c.byID) >= maxCRCs {
		c.byID = map[ID]uint32{} // forgotten CRCs only cost a SHA-256 check
	}
	c.byID[id] = crc
	c.mu.Unlock()
}

func (c *contentCRCs) get(id ID) (uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	crc, ok := c.byID[id]
	return crc, ok
}

// forget drops the CRCs of objects the copy held in old and no longer holds in now (nil:
// nothing): they will not be a base again.
func (c *contentCRCs) forget(old, now map[ID]matLoc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range old {
		if _, kept := now[id]; !kept {
			delete(c.byID, id)
		}
	}
}

// baseCheck hashes the base bytes a tensor is diffed against, to check them at the end:
// with CRC-32C when the content's CRC is known, with xxh3-128 for a base in memory a stream
// took in (memBaseCheck), else with SHA-256 (its identity).
type baseCheck struct {
	hash.Hash
	crc    uint32
	useCRC bool
	xxh    xxh3Digest
	useXXH bool
}

func newBaseCheck(m *materialized, base ID) *baseCheck {
	if crc, ok := m.baseCRC(base); ok {
		return &baseCheck{Hash: crc32.New(castagnoli), crc: crc, useCRC: true}
	}
	return &baseCheck{Hash: sha256.New()}
}

// matches reports whether the bytes hashed are the content of base.
func (b *baseCheck) matches(base ID) bool {
	if b.useCRC {
		return b.Hash.(hash.Hash32).Sum32() == b.crc
	}
	if b.useXXH {
		return xxh3Sum(b.Hash.(*xxh3.Hasher128).Sum128()) == b.xxh
	}
	var got ID
	b.Sum(got[:0])
	return got == base
}

// fresh returns an empty check of the same kind, to hash the same bytes again.
func (b *baseCheck) fresh() hash.Hash {
	if b.useCRC {
		return crc32.New(castagnoli)
	}
	if b.useXXH {
		return xxh3.New128()
	}
	return sha256.New()
}
