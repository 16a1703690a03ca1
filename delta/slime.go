package delta

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"
)

// The slime-compatible delta checkpoint (bytes in docs/format.md Part III §4): a
// directory holding model.safetensors.index.json and shards model-{i:05d}-of-{n:05d}
// .safetensors (0-based i). Each changed tensor is a 1-D U8 tensor holding one zstd frame of
//
//	u32le count | count x u32le byte positions (ascending) | count new bytes
//
// and each shard's __metadata__ maps exactly its tensors to the xxh3-128 (hex, canonical
// big-endian, seed 0) of the tensor's new full raw bytes. Positions are byte positions into
// the tensor's raw bytes, so the diff is taken at byte granularity.

// Constants of the slime delta layout.
const (
	SlimeIndexName = "model.safetensors.index.json"
	// SlimeShardLimit is the default bound on a shard's frame bytes. A shard is closed before
	// a frame would take it past the limit; a frame larger than the limit gets a shard alone.
	SlimeShardLimit = 2 << 30
	// SlimeMaxTensorBytes is the largest tensor a delta can carry (u32 byte positions);
	// versions with a larger changed tensor are served as full checkpoints.
	SlimeMaxTensorBytes = 1 << 32
	// SlimeMaxVersion is the largest version number with six digits.
	SlimeMaxVersion = 999999

	slimeSmallFrame = 256 // payloads below this size need a single-segment frame to carry their size
)

// SlimeShardName is the file name of shard offset (0-based) of total.
func SlimeShardName(offset, total int) string {
	return fmt.Sprintf("model-%05d-of-%05d.safetensors", offset, total)
}

// SlimeChecksum is the lowercase hex xxh3-128 (seed 0, canonical big-endian) of b.
func SlimeChecksum(b []byte) string { return slimeHex(xxh3.Hash128(b)) }

func slimeHex(u xxh3.Uint128) string {
	sum := u.Bytes()
	return hex.EncodeToString(sum[:])
}

// NewSlimeHasher returns a streaming hasher whose Sum128, formatted by SlimeChecksumOf, is
// SlimeChecksum of everything written to it.
func NewSlimeHasher() *xxh3.Hasher128 { return xxh3.New128() }

// SlimeChecksumOf formats a streaming hasher's sum as SlimeChecksum does.
func SlimeChecksumOf(h *xxh3.Hasher128) string { return slimeHex(h.Sum128()) }

// isSlimeChecksum reports whether s is 32 lowercase hex digits.
func isSlimeChecksum(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// slimeVersion formats a version number as six digits.
func slimeVersion(v uint64) string { return fmt.Sprintf("%06d", v) }

// EncodeSlimeIndex returns model.safetensors.index.json of delta version (base version-1):
// exactly the five metadata keys, all strings, and the weight map sorted by tensor name.
func EncodeSlimeIndex(version uint64, weightMap map[string]string) ([]byte, error) {
	if version < 1 || version > SlimeMaxVersion {
		return nil, fmt.Errorf("slime index: version %d is outside 1..%d", version, SlimeMaxVersion)
	}
	var b bytes.Buffer
	b.WriteString("{\n  \"metadata\": {\n")
	fields := [][2]string{
		{"version", slimeVersion(version)},
		{"base_version", slimeVersion(version - 1)},
		{"delta_encoding", "overwrite"},
		{"compression_format", "zstd"},
		{"checksum_format", "xxh3-128"},
	}
	for i, kv := range fields {
		fmt.Fprintf(&b, "    %q: %q", kv[0], kv[1])
		if i < len(fields)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("  },\n  \"weight_map\": {")
	names := make([]string, 0, len(weightMap))
	for n := range weightMap {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		if err := writeJSONString(&b, n); err != nil {
			return nil, fmt.Errorf("slime index: tensor name: %w", err)
		}
		b.WriteString(": ")
		if err := writeJSONString(&b, weightMap[n]); err != nil {
			return nil, fmt.Errorf("slime index: shard of %q: %w", n, err)
		}
	}
	if len(names) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteString("}\n}\n")
	return b.Bytes(), nil
}

// slimePayload builds u32le count | positions | new bytes, checking the positions.
func slimePayload(positions []uint32, newBytes []byte, tensorLen int64) ([]byte, error) {
	switch {
	case len(positions) == 0:
		return nil, fmt.Errorf("no changed bytes (unchanged tensors are omitted)")
	case len(positions) != len(newBytes):
		return nil, fmt.Errorf("%d positions for %d new bytes", len(positions), len(newBytes))
	case tensorLen > SlimeMaxTensorBytes:
		return nil, fmt.Errorf("tensor of %d bytes exceeds the %d bytes u32 positions reach", tensorLen, int64(SlimeMaxTensorBytes))
	}
	out := make([]byte, 4, 4+5*len(positions))
	binary.LittleEndian.PutUint32(out, uint32(len(positions)))
	for i, p := range positions {
		if i > 0 && p <= positions[i-1] || int64(p) >= tensorLen {
			return nil, fmt.Errorf("position %d (after %d) is not ascending within %d bytes", p, positions[max(i-1, 0)], tensorLen)
		}
		out = binary.LittleEndian.AppendUint32(out, p)
	}
	return append(out, newBytes...), nil
}

// SlimeEncoder compresses payloads into zstd frames that always carry their content size.
// Not safe for concurrent use; build one per goroutine and reuse it.
type SlimeEncoder struct {
	// small forces a single-segment frame: klauspost/compress omits the content size of a
	// multi-segment frame under 256 bytes, and the format requires it on every frame.
	small *zstd.Encoder
	// large uses the default window (8 MiB), so decoders with the usual 128 MiB window limit
	// accept frames of any size (a single segment would make the window the whole payload).
	large *zstd.Encoder
}

// NewSlimeEncoder builds the zstd encoders once.
func NewSlimeEncoder() (*SlimeEncoder, error) {
	small, err := zstd.NewWriter(nil, zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	large, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	return &SlimeEncoder{small: small, large: large}, nil
}

// Frame returns the zstd frame of the overwrite payload of a tensor of tensorLen bytes whose
// bytes at positions (ascending) take newBytes.
func (e *SlimeEncoder) Frame(positions []uint32, newBytes []byte, tensorLen int64) ([]byte, error) {
	payload, err := slimePayload(positions, newBytes, tensorLen)
	if err != nil {
		return nil, fmt.Errorf("slime frame: %w", err)
	}
	if len(payload) < slimeSmallFrame {
		return e.small.EncodeAll(payload, nil), nil
	}
	return e.large.EncodeAll(payload, nil), nil
}

// SlimeDiff returns the byte positions where base and cur differ and cur's bytes there.
func SlimeDiff(base, cur []byte) (positions []uint32, newBytes []byte, err error) {
	if len(base) != len(cur) {
		return nil, nil, fmt.Errorf("slime diff: base has %d bytes, new has %d", len(base), len(cur))
	}
	if int64(len(cur)) > SlimeMaxTensorBytes {
		return nil, nil, fmt.Errorf("slime diff: %d bytes exceed the %d bytes u32 positions reach", len(cur), int64(SlimeMaxTensorBytes))
	}
	for i := 0; i < len(cur); {
		// Skip equal 8-byte words; most of a tensor is unchanged.
		if i+8 <= len(cur) && binary.LittleEndian.Uint64(base[i:]) == binary.LittleEndian.Uint64(cur[i:]) {
			i += 8
			continue
		}
		if base[i] != cur[i] {
			positions = append(positions, uint32(i))
			newBytes = append(newBytes, cur[i])
		}
		i++
	}
	return positions, newBytes, nil
}

// slimeDiffReference is the plain loop SlimeDiff must match.
func slimeDiffReference(base, cur []byte) (positions []uint32, newBytes []byte) {
	for i := range cur {
		if base[i] != cur[i] {
			positions = append(positions, uint32(i))
			newBytes = append(newBytes, cur[i])
		}
	}
	return positions, newBytes
}

// SlimeTensor is one changed tensor of a shard.
type SlimeTensor struct {
	Name     string
	FrameLen int64  // bytes of its zstd frame (the U8 tensor's length)
	Checksum string // xxh3-128 hex of the tensor's new raw bytes
}

// SlimeShard is one shard of a finished delta. The shard file is Header followed by the
// frames the writer sent to the shard's sink, DataSize bytes.
type SlimeShard struct {
	Name     string
	Header   []byte
	DataSize int64
	Tensors  []SlimeTensor // in data order
}

// SlimeDelta is a finished delta version: the index file and its shards.
type SlimeDelta struct {
	Index  []byte
	Shards []SlimeShard
}

// SlimeWriter builds a delta version one tensor at a time. Frames go straight to the sink
// of their shard (opened when the shard gets its first frame), so memory holds one frame;
// headers are known only at the end, when Finish returns them with the shards' final names
// (the total is unknown before). Not safe for concurrent use; unusable after an error.
type SlimeWriter struct {
	version uint64
	limit   int64
	sink    func(shard int) (io.Writer, error)
	enc     *SlimeEncoder
	shards  []SlimeShard
	out     io.Writer
	names   map[string]bool
	err     error
}

// NewSlimeWriter starts delta version (base version-1). shardLimit bounds each shard's frame
// bytes (0: SlimeShardLimit); sink(i) returns where the frames of shard i are written.
func NewSlimeWriter(version uint64, shardLimit int64, sink func(shard int) (io.Writer, error)) (*SlimeWriter, error) {
	if version < 1 || version > SlimeMaxVersion {
		return nil, fmt.Errorf("slime delta: version %d is outside 1..%d", version, SlimeMaxVersion)
	}
	if shardLimit <= 0 {
		shardLimit = SlimeShardLimit
	}
	enc, err := NewSlimeEncoder()
	if err != nil {
		return nil, err
	}
	return &SlimeWriter{version: version, limit: shardLimit, sink: sink, enc: enc, names: make(map[string]bool)}, nil
}

func (w *SlimeWriter) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return w.err
}

// Add adds a changed tensor of tensorLen bytes whose bytes at positions take newBytes;
// checksum is SlimeChecksum of the tensor's new full raw bytes.
func (w *SlimeWriter) Add(name string, tensorLen int64, positions []uint32, newBytes []byte, checksum string) error {
	if w.err != nil {
		return w.err
	}
	if w.names[name] {
		return w.fail(fmt.Errorf("slime delta: tensor %q added twice", name))
	}
	if !isSlimeChecksum(checksum) {
		return w.fail(fmt.Errorf("slime delta: tensor %q: checksum %q is not 32 lowercase hex digits", name, checksum))
	}
	frame, err := w.enc.Frame(positions, newBytes, tensorLen)
	if err != nil {
		return w.fail(fmt.Errorf("slime delta: tensor %q: %w", name, err))
	}
	n := len(w.shards)
	if n == 0 || w.shards[n-1].DataSize > 0 && w.shards[n-1].DataSize+int64(len(frame)) > w.limit {
		out, err := w.sink(n)
		if err != nil {
			return w.fail(fmt.Errorf("slime delta: open shard %d: %w", n, err))
		}
		w.shards = append(w.shards, SlimeShard{})
		w.out = out
		n++
	}
	if _, err := w.out.Write(frame); err != nil {
		return w.fail(fmt.Errorf("slime delta: write frame of %q: %w", name, err))
	}
	s := &w.shards[n-1]
	s.DataSize += int64(len(frame))
	s.Tensors = append(s.Tensors, SlimeTensor{Name: name, FrameLen: int64(len(frame)), Checksum: checksum})
	w.names[name] = true
	return nil
}

// AddDiff adds tensor name given its base and new raw bytes; an unchanged tensor is left
// out (changed is false).
func (w *SlimeWriter) AddDiff(name string, base, cur []byte) (changed bool, err error) {
	positions, newBytes, err := SlimeDiff(base, cur)
	if err != nil {
		return false, w.fail(fmt.Errorf("slime delta: tensor %q: %w", name, err))
	}
	if len(positions) == 0 {
		return false, nil
	}
	return true, w.Add(name, int64(len(cur)), positions, newBytes, SlimeChecksum(cur))
}

// Finish names the shards, encodes their headers and the index. A delta with no changed
// tensor is the index alone with an empty weight map.
func (w *SlimeWriter) Finish() (*SlimeDelta, error) {
	if w.err != nil {
		return nil, w.err
	}
	weightMap := make(map[string]string)
	for i := range w.shards {
		s := &w.shards[i]
		s.Name = SlimeShardName(i, len(w.shards))
		meta := make(map[string]string, len(s.Tensors))
		entries := make([]Tensor, len(s.Tensors))
		for j, t := range s.Tensors {
			meta[t.Name] = t.Checksum
			entries[j] = Tensor{Name: t.Name, DType: DTypeU8, Shape: []int64{t.FrameLen}}
			weightMap[t.Name] = s.Name
		}
		hdr, err := EncodeHeader(meta, entries)
		if err != nil {
			return nil, w.fail(fmt.Errorf("slime delta: header of %s: %w", s.Name, err))
		}
		s.Header = hdr
	}
	index, err := EncodeSlimeIndex(w.version, weightMap)
	if err != nil {
		return nil, w.fail(err)
	}
	w.err = fmt.Errorf("slime delta: writer finished")
	return &SlimeDelta{Index: index, Shards: w.shards}, nil
}

// parseSlimeVersion reads a six-digit version string.
func parseSlimeVersion(key, s string) (uint64, error) {
	if len(s) != 6 {
		return 0, fmt.Errorf("%w: slime index: %s %q is not six digits", ErrMalformed, key, s)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: slime index: %s %q is not six digits", ErrMalformed, key, s)
	}
	return v, nil
}
