package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/weightfs/weightfs/delta"
)

// The baselines of figure 1, computed on exactly the changes the store saw.
//
//   - TRL's delta-sync patch: an index (I32, I64 for tensors of 2^31 or more elements) and the
//     new value per changed element: 6 bytes per bf16 element.
//   - slime's `deltas_zstd` encoding (v1 delta weight sync): per tensor, the gaps between
//     consecutive changed element indices minus one (the first gap is the first index) as
//     u16, or u32 for a tensor whose largest gap exceeds 65535; one bucket is the positions
//     of all its tensors followed by their values, wrapped in zstd at level 1. Here a bucket is
//     one safetensors file, and the few hundred bytes of slime's safetensors header and
//     decoding manifest are left out (in slime's favour). zstd level 1 is klauspost's fastest
//     level with entropy coding of all literals, as libzstd's level 1 does it (klauspost's
//     default skips it at that level and would not compress these payloads at all); a test
//     checks it against the zstd command at -1.
//   - The Shannon bound of the positions: at density p, no code for which elements changed can
//     average below H(p)/p bits per changed element (H the binary entropy), whatever the values.

// newSlimeEncoder returns the zstd encoder that stands for slime's zstd level 1.
func newSlimeEncoder() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithAllLitEntropyCompression(true),
		zstd.WithEncoderConcurrency(1))
}

// changeStats counts the changes between two versions and what the baselines spend on them.
type changeStats struct {
	Changed        int64 `json:"changed_elements"`
	Total          int64 `json:"total_elements"`
	TRLBytes       int64 `json:"trl_patch_bytes"`
	SlimeRawBytes  int64 `json:"slime_deltas_bytes"`      // slime `deltas`, before zstd
	SlimeZstdBytes int64 `json:"slime_deltas_zstd_bytes"` // slime `deltas_zstd`
	Tensors        int   `json:"tensors"`
	ChangedTensors int   `json:"changed_tensors"`
}

func (c *changeStats) add(o changeStats) {
	c.Changed += o.Changed
	c.Total += o.Total
	c.TRLBytes += o.TRLBytes
	c.SlimeRawBytes += o.SlimeRawBytes
	c.SlimeZstdBytes += o.SlimeZstdBytes
	c.Tensors += o.Tensors
	c.ChangedTensors += o.ChangedTensors
}

// Density is the fraction of elements that changed.
func (c changeStats) Density() float64 {
	if c.Total == 0 {
		return 0
	}
	return float64(c.Changed) / float64(c.Total)
}

// diffChunkElements bounds one DiffBackend call (it takes fewer than 2^32 elements).
const diffChunkElements = 1 << 28

// measureChanges diffs every safetensors file of cur against the same file of prev, tensor by
// tensor at the dtype's width, and prices the changes in the baselines' formats. Both versions
// must have the same files and tensors (the generator's do); anything else is an error, since
// a changed layout is not a delta.
func measureChanges(prev, cur map[string][]byte, enc *zstd.Encoder) (changeStats, error) {
	var total changeStats
	names := make([]string, 0, len(cur))
	for name := range cur {
		if strings.HasSuffix(name, ".safetensors") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return total, fmt.Errorf("no safetensors file to diff")
	}
	backend := delta.NewCPUDiff()
	for _, name := range names {
		p, ok := prev[name]
		if !ok {
			return total, fmt.Errorf("%s: not in the previous version", name)
		}
		st, err := measureFile(backend, p, cur[name], enc)
		if err != nil {
			return total, fmt.Errorf("%s: %w", name, err)
		}
		total.add(st)
	}
	return total, nil
}

// measureFile is measureChanges for one safetensors file, one slime bucket.
func measureFile(backend delta.DiffBackend, prevFile, curFile []byte, enc *zstd.Encoder) (changeStats, error) {
	var st changeStats
	hp, err := delta.ReadHeader(bytes.NewReader(prevFile), int64(len(prevFile)))
	if err != nil {
		return st, fmt.Errorf("previous version: %w", err)
	}
	hc, err := delta.ReadHeader(bytes.NewReader(curFile), int64(len(curFile)))
	if err != nil {
		return st, err
	}
	var bucket slimeBucket
	var changes delta.Changes
	var idx []uint64
	for _, t := range hc.Tensors {
		tp, ok := hp.Tensor(t.Name)
		if !ok || tp.DType != t.DType || tp.ByteLen() != t.ByteLen() {
			return st, fmt.Errorf("tensor %s: not the same dtype and size in both versions", t.Name)
		}
		width := t.DType.Size()
		base := prevFile[hp.DataStart()+tp.Begin : hp.DataStart()+tp.End]
		now := curFile[hc.DataStart()+t.Begin : hc.DataStart()+t.End]
		elements := t.ByteLen() / int64(width)
		idx = idx[:0]
		var values []byte
		for first := int64(0); first < elements; first += diffChunkElements {
			end := min(first+diffChunkElements, elements)
			changes.Reset()
			lo, hi := first*int64(width), end*int64(width)
			if err := backend.Diff(base[lo:hi], now[lo:hi], width, &changes); err != nil {
				return st, fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			for _, i := range changes.Index {
				idx = append(idx, uint64(first)+uint64(i))
			}
			values = append(values, changes.Values...)
		}
		st.Tensors++
		st.Total += elements
		if len(idx) == 0 {
			continue
		}
		st.ChangedTensors++
		st.Changed += int64(len(idx))
		st.TRLBytes += int64(len(idx)) * int64(trlIndexWidth(elements)+width)
		bucket.add(idx, values)
	}
	st.SlimeRawBytes = int64(bucket.size())
	if bucket.size() > 0 {
		st.SlimeZstdBytes = int64(len(enc.EncodeAll(bucket.bytes(), nil)))
	}
	return st, nil
}

// trlIndexWidth is the byte width of TRL's index for a tensor of n elements.
func trlIndexWidth(n int64) int {
	if n >= 1<<31 {
		return 8
	}
	return 4
}

// slimeBucket accumulates one slime delta bucket: positions of all tensors, then values.
type slimeBucket struct {
	positions, values []byte
}

func (s *slimeBucket) add(indices []uint64, values []byte) {
	s.positions = appendSlimeGaps(s.positions, indices)
	s.values = append(s.values, values...)
}

func (s *slimeBucket) size() int { return len(s.positions) + len(s.values) }

// bytes is the bucket's payload as slime's safetensors blob lays it out (its tensors sorted by
// name: __positions__ before __values__).
func (s *slimeBucket) bytes() []byte {
	return append(append([]byte(nil), s.positions...), s.values...)
}

// appendSlimeGaps appends slime's `deltas` position encoding of one tensor's ascending changed
// indices: gap[k] = idx[k] - idx[k-1] - 1 with idx[-1] = -1, little-endian u16 if every gap
// fits, else u32 (slime's per-parameter fallback).
func appendSlimeGaps(dst []byte, indices []uint64) []byte {
	var maxGap uint64
	prev := int64(-1)
	for _, i := range indices {
		maxGap = max(maxGap, uint64(int64(i)-prev-1))
		prev = int64(i)
	}
	prev = -1
	for _, i := range indices {
		gap := uint64(int64(i) - prev - 1)
		prev = int64(i)
		if maxGap <= math.MaxUint16 {
			dst = binary.LittleEndian.AppendUint16(dst, uint16(gap))
		} else {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(gap))
		}
	}
	return dst
}

// positionBoundBits is the Shannon bound on coding which elements changed, in bits per changed
// element, when changed of total elements did: H(p)/p with p = changed/total. It is 0 when
// nothing or everything changed (there is nothing to say).
func positionBoundBits(changed, total int64) float64 {
	if total <= 0 || changed <= 0 || changed >= total {
		return 0
	}
	p := float64(changed) / float64(total)
	h := -p*math.Log2(p) - (1-p)*math.Log2(1-p)
	return h / p
}
