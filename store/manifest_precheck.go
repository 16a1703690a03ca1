package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/weightfs/weightfs/store/format"
	"github.com/weightfs/weightfs/store/pack"
)

// A seal's manifest names the pack indexes that making its objects durable writes
// (SyncObjects), so it can be encoded only after them; but its check (encodeManifestChecked:
// a decode of every tensor) is the largest per-tensor part of a seal of many tensors. It is
// therefore done while the objects are made durable, on the manifest with a placeholder index
// name in place of the ones the sync writes (precheckManifest); once their names are known
// (finalManifest), only the list of names, the last field of the JSON, changes: it is written
// by encoding/json (the reference the manifest's encoder is pinned to), the rest of the bytes
// are those checked, and the names are checked as Validate checks them. Decoding JSON is
// compositional, so the result reads back as the manifest with its names as surely as the
// checked bytes read back as the manifest with the placeholder. encodeManifestChecked stays the
// reference (TestManifestPrecheckMatchesReference) and the path of every case the splice does
// not cover (no index named, a precheck that failed: its verdict is the reference's).

// placeholderIndex is a well-formed pack index name no index has (its sum is not a sum of
// encoded index bytes that pack.Name would spell with this sequence number).
var placeholderIndex = fmt.Sprintf("%016d-%016x", uint64(0), uint64(0))

// manifestPrecheck is the check of a manifest under way (precheckManifest).
type manifestPrecheck struct {
	done  chan struct{}
	names []string // the index names it was checked with
	data  []byte   // the checked bytes, nil on an error
	err   error
}

// precheckManifest encodes and checks m, with the names of indexes and placeholderIndex as its
// index names, in a goroutine of its own. m must not change until finalManifest returns (its
// Indexes excepted: the check works on a copy of the manifest's head).
func precheckManifest(m *manifest, indexes []string, limit uint64) *manifestPrecheck {
	c := &manifestPrecheck{done: make(chan struct{}), names: mergeIndexNames(indexes, []string{placeholderIndex})}
	m0 := *m
	m0.Indexes = c.names
	go func() {
		defer close(c.done)
		c.data, c.err = encodeManifestChecked(&m0, limit)
	}()
	return c
}

// finalManifest returns the bytes of m, whose Indexes are now the seal's: those checked with the
// placeholder's names replaced, or, where that does not apply, encodeManifestChecked's.
func (c *manifestPrecheck) finalManifest(m *manifest, limit uint64) ([]byte, error) {
	if b, ok := c.spliced(m, limit); ok {
		return b, nil
	}
	return encodeManifestChecked(m, limit)
}

// spliced is the checked bytes with m's index names in place of the placeholder's; false where
// that does not apply (the precheck failed, m names no index or a name Validate refuses, the
// JSON would pass limit): encodeManifestChecked then gives the verdict.
func (c *manifestPrecheck) spliced(m *manifest, limit uint64) ([]byte, bool) {
	<-c.done
	if c.err != nil || len(m.Indexes) == 0 {
		return nil, false
	}
	for _, n := range m.Indexes {
		if _, ok := pack.ParseName(n); !ok {
			return nil, false
		}
	}
	js, err := manifestBody(c.data)
	if err != nil {
		return nil, false
	}
	was, err1 := indexesTail(c.names)
	now, err2 := indexesTail(m.Indexes)
	if err1 != nil || err2 != nil || !bytes.HasSuffix(js, was) {
		return nil, false
	}
	n := len(js) - len(was) + len(now)
	if uint64(n) > limit {
		return nil, false
	}
	b := make([]byte, format.ManifestHeadLen, format.ManifestHeadLen+n+4)
	copy(b, c.data[:format.ManifestHeadLen]) // magic and format version: ManifestIndexes both
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	b = append(b, js[:len(js)-len(was)]...)
	b = append(b, now...)
	return binary.LittleEndian.AppendUint32(b, format.CRC32C(b)), true
}

// indexesTail is the end of a manifest's JSON that names the indexes names (not empty), as
// encoding/json writes it: the manifest's last field and its closing brace.
func indexesTail(names []string) ([]byte, error) {
	list, err := json.Marshal(slices.Clip(names))
	if err != nil {
		return nil, err
	}
	b := append([]byte(`,"indexes":`), list...)
	return append(b, '}'), nil
}
