package delta

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"github.com/klauspost/compress/zstd"
)

// The decoder of slime delta checkpoints, strict about every detail a receiver relies on;
// used by tests and the end-to-end checks.

// SlimeIndex is a parsed model.safetensors.index.json of a delta version.
type SlimeIndex struct {
	Version     uint64
	BaseVersion uint64
	WeightMap   map[string]string // tensor name -> shard file name
	Shards      []string          // shard file names, in offset order
	// Encoding is delta_encoding: SlimeOverwrite, or SlimeXOR in an index
	// ParseSlimeIndexIn accepted.
	Encoding string
}

var slimeShardPattern = regexp.MustCompile(`^model-(\d{5})-of-(\d{5})\.safetensors$`)

// ParseSlimeIndex parses and checks a delta index: exactly the keys metadata and weight_map;
// exactly the five metadata keys, all strings, with six-digit versions, base = version-1,
// overwrite/zstd/xxh3-128; every shard name well formed, with one total, and every offset
// below it used.
func ParseSlimeIndex(data []byte) (*SlimeIndex, error) { return parseSlimeIndex(data, false) }

func parseSlimeIndex(data []byte, xor bool) (*SlimeIndex, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: slime index: %v", ErrMalformed, err)
	}
	if len(top) != 2 || top["metadata"] == nil || top["weight_map"] == nil {
		return nil, fmt.Errorf("%w: slime index must hold exactly \"metadata\" and \"weight_map\"", ErrMalformed)
	}
	var meta map[string]any
	if err := json.Unmarshal(top["metadata"], &meta); err != nil {
		return nil, fmt.Errorf("%w: slime index metadata: %v", ErrMalformed, err)
	}
	want := map[string]string{"delta_encoding": "overwrite", "compression_format": "zstd", "checksum_format": "xxh3-128"}
	if len(meta) != 5 {
		return nil, fmt.Errorf("%w: slime index metadata has %d keys, want exactly 5", ErrMalformed, len(meta))
	}
	str := func(key string) (string, error) {
		s, ok := meta[key].(string)
		if !ok {
			return "", fmt.Errorf("%w: slime index metadata %q is %v, want a string", ErrMalformed, key, meta[key])
		}
		return s, nil
	}
	for key, v := range want {
		s, err := str(key)
		if err != nil {
			return nil, err
		}
		if key == "delta_encoding" && xor && s == SlimeXOR {
			continue
		}
		if s != v {
			return nil, fmt.Errorf("%w: slime index %s %q, want %q", ErrUnsupportedVersion, key, s, v)
		}
	}
	idx := &SlimeIndex{Encoding: meta["delta_encoding"].(string)}
	for key, dst := range map[string]*uint64{"version": &idx.Version, "base_version": &idx.BaseVersion} {
		s, err := str(key)
		if err != nil {
			return nil, err
		}
		if *dst, err = parseSlimeVersion(key, s); err != nil {
			return nil, err
		}
	}
	if idx.Version == 0 || idx.BaseVersion != idx.Version-1 {
		return nil, fmt.Errorf("%w: slime index base_version %06d is not version %06d - 1", ErrMalformed, idx.BaseVersion, idx.Version)
	}
	if err := json.Unmarshal(top["weight_map"], &idx.WeightMap); err != nil {
		return nil, fmt.Errorf("%w: slime index weight_map: %v", ErrMalformed, err)
	}
	total := -1
	used := map[int]bool{}
	for name, shard := range idx.WeightMap {
		m := slimeShardPattern.FindStringSubmatch(shard)
		if m == nil {
			return nil, fmt.Errorf("%w: slime index maps %q to %q, not model-NNNNN-of-NNNNN.safetensors", ErrMalformed, name, shard)
		}
		off, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		if total >= 0 && n != total || off >= n {
			return nil, fmt.Errorf("%w: slime index shard %q does not fit %d shards", ErrMalformed, shard, max(total, n))
		}
		total = n
		used[off] = true
	}
	for i := 0; i < total; i++ {
		if !used[i] {
			return nil, fmt.Errorf("%w: slime index has no tensor in shard %s", ErrMalformed, SlimeShardName(i, total))
		}
		idx.Shards = append(idx.Shards, SlimeShardName(i, total))
	}
	return idx, nil
}

// SlimeShardReader is an opened shard of a delta.
type SlimeShardReader struct {
	Header *Header
	r      io.ReaderAt
}

// OpenSlimeShard parses a shard: every tensor a 1-D U8 tensor, and __metadata__ holding
// exactly one lowercase xxh3-128 hex checksum per tensor and nothing else.
func OpenSlimeShard(r io.ReaderAt, size int64) (*SlimeShardReader, error) {
	h, err := ReadHeader(r, size)
	if err != nil {
		return nil, fmt.Errorf("slime shard: %w", err)
	}
	if len(h.Metadata) != len(h.Tensors) {
		return nil, fmt.Errorf("%w: slime shard __metadata__ has %d keys for %d tensors", ErrMalformed, len(h.Metadata), len(h.Tensors))
	}
	for _, t := range h.Tensors {
		if t.DType != DTypeU8 || len(t.Shape) != 1 {
			return nil, fmt.Errorf("%w: slime shard tensor %q is %s%v, want 1-D U8", ErrMalformed, t.Name, t.DType, t.Shape)
		}
		if !isSlimeChecksum(h.Metadata[t.Name]) {
			return nil, fmt.Errorf("%w: slime shard checksum of %q is %q, want 32 lowercase hex digits", ErrMalformed, t.Name, h.Metadata[t.Name])
		}
	}
	return &SlimeShardReader{Header: h, r: r}, nil
}

// Frame reads the zstd frame of tensor name.
func (s *SlimeShardReader) Frame(name string) ([]byte, error) {
	t, ok := s.Header.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("slime shard has no tensor %q", name)
	}
	frame := make([]byte, t.ByteLen())
	if err := readFull(s.r, frame, s.Header.DataStart()+t.Begin); err != nil {
		return nil, fmt.Errorf("read frame of %q: %w", name, err)
	}
	return frame, nil
}

// zstdFrameLen walks one zstd frame's blocks and returns its length, so trailing bytes (a
// second frame, say) are detected; it also returns the frame's declared content size.
func zstdFrameLen(frame []byte) (length int, contentSize uint64, err error) {
	var h zstd.Header
	if err := h.Decode(frame); err != nil {
		return 0, 0, fmt.Errorf("zstd frame header: %w", err)
	}
	if h.Skippable {
		return 0, 0, fmt.Errorf("zstd frame is a skippable frame")
	}
	if !h.HasFCS {
		return 0, 0, fmt.Errorf("zstd frame does not carry its content size")
	}
	pos := h.HeaderSize
	for {
		if pos+3 > len(frame) {
			return 0, 0, fmt.Errorf("zstd frame truncated in a block header at %d", pos)
		}
		bh := uint32(frame[pos]) | uint32(frame[pos+1])<<8 | uint32(frame[pos+2])<<16
		pos += 3
		size := int(bh >> 3)
		switch (bh >> 1) & 3 {
		case 1: // RLE: one byte repeated size times
			size = 1
		case 3:
			return 0, 0, fmt.Errorf("zstd frame has a reserved block type at %d", pos-3)
		}
		if pos+size > len(frame) {
			return 0, 0, fmt.Errorf("zstd frame truncated in a block at %d", pos)
		}
		pos += size
		if bh&1 == 1 {
			break
		}
	}
	if frame[4]&(1<<2) != 0 { // Content_Checksum_flag
		pos += 4
	}
	if pos > len(frame) {
		return 0, 0, fmt.Errorf("zstd frame truncated in its checksum")
	}
	return pos, h.FrameContentSize, nil
}

// DecodeSlimeFrame decodes the frame of a tensor of tensorLen bytes and checks the payload:
// exactly one frame carrying its content size, count <= tensorLen, exactly 4+5*count bytes,
// positions strictly ascending and inside the tensor.
func DecodeSlimeFrame(frame []byte, tensorLen int64) (positions []uint32, newBytes []byte, err error) {
	n, fcs, err := zstdFrameLen(frame)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: slime frame: %v", ErrMalformed, err)
	}
	if n != len(frame) {
		return nil, nil, fmt.Errorf("%w: slime frame: %d bytes follow the zstd frame", ErrMalformed, len(frame)-n)
	}
	if fcs < 9 || fcs > 4+5*uint64(min(tensorLen, SlimeMaxTensorBytes)) || (fcs-4)%5 != 0 {
		return nil, nil, fmt.Errorf("%w: slime frame content size %d cannot hold a payload for %d bytes", ErrMalformed, fcs, tensorLen)
	}
	// The bound is the content size, but at least the small windows the encoder picks.
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(max(fcs, 1<<24)))
	if err != nil {
		return nil, nil, fmt.Errorf("zstd decoder: %w", err)
	}
	defer dec.Close()
	payload, err := dec.DecodeAll(frame, make([]byte, 0, fcs))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: slime frame: %v", ErrMalformed, err)
	}
	if uint64(len(payload)) != fcs {
		return nil, nil, fmt.Errorf("%w: slime frame decodes to %d bytes, its header says %d", ErrMalformed, len(payload), fcs)
	}
	count := binary.LittleEndian.Uint32(payload)
	if int64(count) > tensorLen || uint64(len(payload)) != 4+5*uint64(count) {
		return nil, nil, fmt.Errorf("%w: slime payload of %d bytes has count %d for a tensor of %d bytes", ErrMalformed, len(payload), count, tensorLen)
	}
	positions = make([]uint32, count)
	for i := range positions {
		positions[i] = binary.LittleEndian.Uint32(payload[4+4*i:])
		if i > 0 && positions[i] <= positions[i-1] || int64(positions[i]) >= tensorLen {
			return nil, nil, fmt.Errorf("%w: slime payload position %d (index %d) is not ascending within %d bytes", ErrMalformed, positions[i], i, tensorLen)
		}
	}
	return positions, payload[4+4*int(count):], nil
}

// ApplySlimeFrame overwrites the bytes of tensor (its raw bytes, changed in place) as the
// frame says, then checks the result against checksum (ErrBaseMismatch if it differs).
func ApplySlimeFrame(frame []byte, tensor []byte, checksum string) error {
	positions, newBytes, err := DecodeSlimeFrame(frame, int64(len(tensor)))
	if err != nil {
		return err
	}
	for i, p := range positions {
		tensor[p] = newBytes[i]
	}
	if got := SlimeChecksum(tensor); got != checksum {
		return fmt.Errorf("%w: xxh3-128 after the delta is %s, want %s", ErrBaseMismatch, got, checksum)
	}
	return nil
}

// ApplySlimeDelta applies a whole delta version: it parses the index, opens every shard with
// open, checks that each holds exactly the tensors the index maps to it, and applies each
// tensor's frame to the bytes tensor(name) returns (the base tensor's raw bytes, changed in
// place), checking its checksum.
func ApplySlimeDelta(index []byte, open func(shard string) (io.ReaderAt, int64, error), tensor func(name string) ([]byte, error)) (*SlimeIndex, error) {
	idx, err := ParseSlimeIndex(index)
	if err != nil {
		return nil, err
	}
	for _, shard := range idx.Shards {
		r, size, err := open(shard)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", shard, err)
		}
		s, err := OpenSlimeShard(r, size)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", shard, err)
		}
		want := 0
		for _, sh := range idx.WeightMap {
			if sh == shard {
				want++
			}
		}
		if len(s.Header.Tensors) != want {
			return nil, fmt.Errorf("%w: %s holds %d tensors, the index maps %d to it", ErrMalformed, shard, len(s.Header.Tensors), want)
		}
		for _, t := range s.Header.Tensors {
			if idx.WeightMap[t.Name] != shard {
				return nil, fmt.Errorf("%w: %s holds %q, which the index maps to %q", ErrMalformed, shard, t.Name, idx.WeightMap[t.Name])
			}
			frame, err := s.Frame(t.Name)
			if err != nil {
				return nil, err
			}
			raw, err := tensor(t.Name)
			if err != nil {
				return nil, fmt.Errorf("base of %q: %w", t.Name, err)
			}
			if err := ApplySlimeFrame(frame, raw, s.Header.Metadata[t.Name]); err != nil {
				return nil, fmt.Errorf("%s: tensor %q: %w", shard, t.Name, err)
			}
		}
	}
	return idx, nil
}

// slimeShardBytes joins a finished shard's header and its frames (tests and small deltas).
func slimeShardBytes(s SlimeShard, frames []byte) []byte {
	return append(bytes.Clone(s.Header), frames...)
}
