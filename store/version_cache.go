package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/weightfs/weightfs/store/format"
)

// versionCache holds parsed versions (manifests with their lookups), bounded by their
// estimated memory. A parsed version costs about 300 bytes a tensor, so a store of many
// versions of 10^6 tensors must not keep them all: the bound holds a few versions of a
// usual model, and the last versionCacheFloor versions used whatever they cost. Each version is
// parsed once however many goroutines ask for it at once (a mount's readers of a version just
// evicted), and the version list never parses a manifest (versionSummary).
type versionCache struct {
	*lru[uint64, *version]
	flight singleflight.Group

	decoded atomic.Int64 // tensors parsed from manifests (tests: what listing and reading cost)
}

// versionCacheBytes bounds the parsed versions a Store keeps, above versionCacheFloor.
const versionCacheBytes = 64 << 20

// versionCacheFloor is how many of the most recently used parsed versions are kept whatever
// they cost: a patch reads two versions at once and a read-only mount's poller the newest
// beside the one its readers use, so a bound that held one large version alone made them
// parse a manifest of 100,000 tensors again at every turn (docs/benchmarks-history.md,
// "Tensor count (issue 29 item 5)", and its git history).
const versionCacheFloor = 3

func newVersionCache(limit int64) *versionCache {
	c := &versionCache{lru: newLRU[uint64, *version](limit)}
	c.keepOversized = true
	c.floor = versionCacheFloor
	return c
}

// versionCost estimates the memory of a parsed version from its manifest file's size: the
// decoded structures take about its size again, the lookups built on first use as much.
func versionCost(manifestBytes int) int64 { return 3 * int64(manifestBytes) }

// loadVersion reads, checks and parses the manifest of version v (cached).
func (vl *versionList) loadVersion(v uint64) (*version, error) {
	if ver, ok := vl.manifests.get(v); ok {
		return ver, nil
	}
	r, err, _ := vl.manifests.flight.Do(strconv.FormatUint(v, 10), func() (any, error) {
		if ver, ok := vl.manifests.get(v); ok {
			return ver, nil
		}
		data, err := vl.getManifest(v)
		if err != nil {
			return nil, err
		}
		m, err := decodeManifest(data)
		if err != nil {
			return nil, vl.noteDamaged(v, fmt.Errorf("manifest of version %d: %w", v, err))
		}
		if m.Version != v {
			return nil, vl.noteDamaged(v, fmt.Errorf("manifest of version %d names version %d: %w", v, m.Version, ErrCorrupt))
		}
		ver := newVersion(m)
		vl.manifests.decoded.Add(int64(ver.tensors()))
		vl.manifests.add(v, ver, versionCost(len(data)))
		return ver, nil
	})
	if err != nil {
		return nil, err
	}
	return r.(*version), nil
}

func (vl *versionList) getManifest(v uint64) ([]byte, error) {
	data, err := vl.st.be.GetManifest(v)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("version %d: %w", v, ErrNoSuchVersion)
	}
	return data, err
}

// versionSummary returns the summary of version v for the version list: from its parsed
// version when that is cached, else from its manifest, checked as a read checks it (magic,
// format, CRC) but decoded to the summary alone. Listing a store's versions (log, every
// open) so holds one manifest's bytes at a time and parses no tensor.
func (vl *versionList) versionSummary(v uint64) (VersionInfo, error) {
	info, _, err := vl.versionSummaryIndexes(v)
	return info, err
}

// versionSummaryIndexes is versionSummary that also returns the pack indexes the manifest
// names (a reader loads them before it reads the version: version_list.go).
func (vl *versionList) versionSummaryIndexes(v uint64) (VersionInfo, []string, error) {
	if ver, ok := vl.manifests.get(v); ok {
		return summarize(ver.m), ver.m.Indexes, nil
	}
	data, err := vl.getManifest(v)
	if err != nil {
		return VersionInfo{}, nil, err
	}
	info, indexes, err := decodeManifestSummaryIndexes(data)
	if err != nil {
		return VersionInfo{}, nil, vl.noteDamaged(v, fmt.Errorf("manifest of version %d: %w", v, err))
	}
	if info.Number != v {
		return VersionInfo{}, nil, vl.noteDamaged(v, fmt.Errorf("manifest of version %d names version %d: %w", v, info.Number, ErrCorrupt))
	}
	return info, indexes, nil
}

// manifestSummary is what the version list needs of a manifest, as encoding/json reads it
// (decodeManifestHeadReflect: the reference of format.DecodeManifestHead). Its files are
// counted and skipped: json hands each to skipped.UnmarshalJSON as a slice of the input.
type manifestSummary struct {
	Version  uint64        `json:"version"`
	Created  time.Time     `json:"created"`
	Previous uint64        `json:"previous"`
	Files    []skipped     `json:"files"`
	Stats    manifestStats `json:"stats"`
	Indexes  []string      `json:"indexes"`
}

type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// decodeManifestSummary is decodeManifest for the summary alone: the same checks of the
// file, the summary's fields, no tensor.
func decodeManifestSummary(b []byte) (VersionInfo, error) {
	info, _, err := decodeManifestSummaryIndexes(b)
	return info, err
}

// decodeManifestSummaryIndexes is decodeManifestSummary that also returns the names of the
// pack indexes the manifest names.
func decodeManifestSummaryIndexes(b []byte) (VersionInfo, []string, error) {
	js, err := manifestBody(b)
	if err != nil {
		return VersionInfo{}, nil, err
	}
	m, err := format.DecodeManifestHead(js) // without reflection; else as encoding/json reads it:
	if err != nil {
		if m, err = decodeManifestHeadReflect(js); err != nil {
			return VersionInfo{}, nil, err
		}
	}
	if m.Version == 0 || m.Previous >= m.Version {
		return VersionInfo{}, nil, fmt.Errorf("manifest of version %d, previous %d: %w", m.Version, m.Previous, ErrCorrupt)
	}
	return VersionInfo{
		Number: m.Version, Created: m.Created, Files: m.Files,
		LogicalBytes: m.Stats.LogicalBytes, StoredBytes: m.Stats.NewObjectBytes,
		ChangedElems: m.Stats.ChangedElems, TotalElems: m.Stats.TotalElems,
		PreviousNumber: m.Previous,
	}, m.Indexes, nil
}

// decodeManifestHeadReflect is format.DecodeManifestHead by encoding/json (manifestSummary):
// the reference it is tested against, and the decoder of what it leaves alone.
func decodeManifestHeadReflect(js []byte) (format.ManifestHead, error) {
	var m manifestSummary
	if err := json.Unmarshal(js, &m); err != nil {
		return format.ManifestHead{}, fmt.Errorf("manifest JSON: %v: %w", err, ErrCorrupt)
	}
	return format.ManifestHead{Version: m.Version, Created: m.Created, Previous: m.Previous, Files: len(m.Files),
		Stats: m.Stats, Indexes: m.Indexes}, nil
}
