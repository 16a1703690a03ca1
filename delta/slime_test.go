package delta

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestSlimeChecksum(t *testing.T) {
	// Known xxh3-128 values (seed 0): the empty input and "a", canonical big-endian hex.
	tests := map[string]string{
		"":  "99aa06d3014798d86001c324468d497f",
		"a": "a96faf705af16834e6c632b61e964e1f",
	}
	for in, want := range tests {
		if got := SlimeChecksum([]byte(in)); got != want {
			t.Errorf("SlimeChecksum(%q) = %s, want %s", in, got, want)
		}
		h := NewSlimeHasher()
		h.Write([]byte(in))
		if got := SlimeChecksumOf(h); got != want {
			t.Errorf("streamed checksum of %q = %s, want %s", in, got, want)
		}
	}
}

func TestSlimeShardName(t *testing.T) {
	if got := SlimeShardName(0, 3); got != "model-00000-of-00003.safetensors" {
		t.Errorf("got %s", got)
	}
}

func TestSlimeIndexExact(t *testing.T) {
	got, err := EncodeSlimeIndex(43, map[string]string{"b": "model-00000-of-00001.safetensors", "a": "model-00000-of-00001.safetensors"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "metadata": {
    "version": "000043",
    "base_version": "000042",
    "delta_encoding": "overwrite",
    "compression_format": "zstd",
    "checksum_format": "xxh3-128"
  },
  "weight_map": {
    "a": "model-00000-of-00001.safetensors",
    "b": "model-00000-of-00001.safetensors"
  }
}
`
	if string(got) != want {
		t.Errorf("index\n%s\nwant\n%s", got, want)
	}
	empty, _ := EncodeSlimeIndex(1, nil)
	var parsed map[string]map[string]any
	if err := json.Unmarshal(empty, &parsed); err != nil || len(parsed["weight_map"]) != 0 || parsed["metadata"]["base_version"] != "000000" {
		t.Errorf("empty index %s: %v", empty, err)
	}
	for _, v := range []uint64{0, 1000000} {
		if _, err := EncodeSlimeIndex(v, nil); err == nil {
			t.Errorf("version %d accepted", v)
		}
	}
}

func TestParseSlimeIndexErrors(t *testing.T) {
	good := `{"metadata": {"version": "000043", "base_version": "000042", "delta_encoding": "overwrite", "compression_format": "zstd", "checksum_format": "xxh3-128"}, "weight_map": {"a": "model-00000-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}}`
	idx, err := ParseSlimeIndex([]byte(good))
	if err != nil || idx.Version != 43 || len(idx.Shards) != 2 {
		t.Fatalf("good index: %+v %v", idx, err)
	}
	tests := []struct{ name, from, to string }{
		{"total_size", `"checksum_format": "xxh3-128"`, `"checksum_format": "xxh3-128", "total_size": "1"`},
		{"numeric version", `"000043"`, `43`},
		{"short version", `"000043"`, `"43"`},
		{"base not n-1", `"000042"`, `"000041"`},
		{"xor", `"overwrite"`, `"xor"`},
		{"other checksum", `"xxh3-128"`, `"adler32"`},
		{"bad shard name", `model-00001-of-00002`, `model-1-of-2`},
		{"shard totals differ", `model-00001-of-00002`, `model-00001-of-00003`},
		{"missing shard", `model-00001-of-00002`, `model-00000-of-00002`},
		{"offset beyond total", `model-00001-of-00002`, `model-00002-of-00002`},
		{"extra top key", `"weight_map"`, `"x": 1, "weight_map"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := strings.Replace(good, tt.from, tt.to, 1)
			if bad == good {
				t.Fatal("edit did not apply")
			}
			if _, err := ParseSlimeIndex([]byte(bad)); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestSlimeDiffMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{0, 1, 7, 8, 9, 64, 1000, 4099} {
		base := make([]byte, n)
		for i := range base {
			base[i] = byte(r.Uint32())
		}
		cur := bytes.Clone(base)
		for i := 0; i < n/5+1 && n > 0; i++ {
			cur[r.IntN(n)] ^= byte(1 + r.IntN(255))
		}
		p, v, err := SlimeDiff(base, cur)
		rp, rv := slimeDiffReference(base, cur)
		if err != nil || !reflect.DeepEqual(p, rp) || !bytes.Equal(v, rv) {
			t.Errorf("n=%d: SlimeDiff differs from the reference", n)
		}
	}
	if _, _, err := SlimeDiff(make([]byte, 2), make([]byte, 3)); err == nil {
		t.Error("length mismatch accepted")
	}
}

// TestSlimeFrameContentSize checks that every frame, small or large, carries its content
// size and decodes to the payload.
func TestSlimeFrameContentSize(t *testing.T) {
	enc, err := NewSlimeEncoder()
	if err != nil {
		t.Fatal(err)
	}
	for _, count := range []int{1, 10, 50, 51, 52, 200, 205, 300, 100000} {
		positions := make([]uint32, count)
		newBytes := make([]byte, count)
		for i := range positions {
			positions[i] = uint32(3 * i)
			newBytes[i] = byte(i * 7)
		}
		frame, err := enc.Frame(positions, newBytes, int64(3*count))
		if err != nil {
			t.Fatal(err)
		}
		var h zstd.Header
		if err := h.Decode(frame); err != nil || !h.HasFCS || h.FrameContentSize != uint64(4+5*count) {
			t.Errorf("count %d: header %+v, %v", count, h, err)
		}
		p, v, err := DecodeSlimeFrame(frame, int64(3*count))
		if err != nil || !reflect.DeepEqual(p, positions) || !bytes.Equal(v, newBytes) {
			t.Errorf("count %d: decode: %v", count, err)
		}
	}
}

func TestSlimeFrameErrors(t *testing.T) {
	enc, _ := NewSlimeEncoder()
	if _, err := enc.Frame(nil, nil, 10); err == nil {
		t.Error("empty frame accepted")
	}
	if _, err := enc.Frame([]uint32{2, 1}, []byte{1, 2}, 10); err == nil {
		t.Error("descending positions accepted")
	}
	if _, err := enc.Frame([]uint32{10}, []byte{1}, 10); err == nil {
		t.Error("position beyond tensor accepted")
	}
	if _, err := enc.Frame([]uint32{1}, []byte{1}, SlimeMaxTensorBytes+1); err == nil {
		t.Error("tensor over 4 GiB accepted")
	}
	good, _ := enc.Frame([]uint32{1, 5}, []byte{9, 9}, 10)
	raw := func(payload []byte) []byte {
		e, _ := zstd.NewWriter(nil, zstd.WithSingleSegment(true))
		return e.EncodeAll(payload, nil)
	}
	payload := func(count uint32, pos ...uint32) []byte {
		b := binary.LittleEndian.AppendUint32(nil, count)
		for _, p := range pos {
			b = binary.LittleEndian.AppendUint32(b, p)
		}
		return append(b, make([]byte, len(pos))...)
	}
	noFCS, _ := zstd.NewWriter(nil, zstd.WithSingleSegment(false))
	tests := []struct {
		name  string
		frame []byte
	}{
		{"two frames", append(bytes.Clone(good), good...)},
		{"trailing byte", append(bytes.Clone(good), 0)},
		{"truncated", good[:len(good)-1]},
		{"not zstd", []byte("hello world, not zstd")},
		{"no content size", noFCS.EncodeAll(payload(1, 3), nil)},
		{"descending", raw(payload(2, 5, 1))},
		{"repeated", raw(payload(2, 1, 1))},
		{"out of range", raw(payload(1, 10))},
		{"count too big", raw(append(payload(3, 1, 2), 0))},
		{"empty", raw(payload(0))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := DecodeSlimeFrame(tt.frame, 10); !errors.Is(err, ErrMalformed) {
				t.Errorf("err %v, want ErrMalformed", err)
			}
		})
	}
}

// slimeTestDelta writes a delta of the given tensors (name -> base, new) with a shard limit,
// returning the files of the directory.
func slimeTestDelta(t *testing.T, version uint64, limit int64, names []string, base, cur map[string][]byte) map[string][]byte {
	t.Helper()
	var spools []*bytes.Buffer
	w, err := NewSlimeWriter(version, limit, func(i int) (io.Writer, error) {
		if i != len(spools) {
			return nil, fmt.Errorf("shard %d opened out of order", i)
		}
		spools = append(spools, &bytes.Buffer{})
		return spools[i], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := w.AddDiff(n, base[n], cur[n]); err != nil {
			t.Fatal(err)
		}
	}
	d, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{SlimeIndexName: d.Index}
	for i, s := range d.Shards {
		if s.DataSize != int64(spools[i].Len()) {
			t.Errorf("shard %s: DataSize %d, spool %d", s.Name, s.DataSize, spools[i].Len())
		}
		files[s.Name] = slimeShardBytes(s, spools[i].Bytes())
	}
	return files
}

func TestSlimeDeltaRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	names := []string{"embed", "layer.0.q", "layer.0.k", "norm", "same"}
	base, cur := map[string][]byte{}, map[string][]byte{}
	for i, n := range names {
		b := make([]byte, 2000*(i+1))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		c := bytes.Clone(b)
		if n != "same" {
			for k := 0; k < 20*(i+1); k++ {
				c[r.IntN(len(c))]++
			}
		}
		base[n], cur[n] = b, c
	}
	for _, limit := range []int64{0, 300} {
		t.Run(fmt.Sprint("limit", limit), func(t *testing.T) {
			files := slimeTestDelta(t, 7, limit, names, base, cur)
			idx, err := ParseSlimeIndex(files[SlimeIndexName])
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := idx.WeightMap["same"]; ok || len(idx.WeightMap) != 4 {
				t.Errorf("weight map %v", idx.WeightMap)
			}
			if limit == 0 && len(idx.Shards) != 1 || limit == 300 && len(idx.Shards) < 3 {
				t.Errorf("%d shards with limit %d", len(idx.Shards), limit)
			}
			if len(files) != len(idx.Shards)+1 {
				t.Errorf("%d files for %d shards", len(files), len(idx.Shards))
			}
			work := map[string][]byte{}
			for n, b := range base {
				work[n] = bytes.Clone(b)
			}
			_, err = ApplySlimeDelta(files[SlimeIndexName],
				func(s string) (io.ReaderAt, int64, error) {
					b, ok := files[s]
					if !ok {
						return nil, 0, fmt.Errorf("no shard %s", s)
					}
					return bytes.NewReader(b), int64(len(b)), nil
				},
				func(n string) ([]byte, error) { return work[n], nil })
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if !bytes.Equal(work[n], cur[n]) {
					t.Errorf("tensor %s differs after the delta", n)
				}
			}
			// Applying to the wrong base fails the checksum.
			wrong := bytes.Clone(base["norm"])
			wrong[0]++
			work["norm"] = wrong
			for n, b := range base {
				if n != "norm" {
					work[n] = bytes.Clone(b)
				}
			}
			_, err = ApplySlimeDelta(files[SlimeIndexName],
				func(s string) (io.ReaderAt, int64, error) {
					return bytes.NewReader(files[s]), int64(len(files[s])), nil
				},
				func(n string) ([]byte, error) { return work[n], nil })
			if !errors.Is(err, ErrBaseMismatch) {
				t.Errorf("wrong base: %v", err)
			}
		})
	}
}

func TestSlimeShardLayout(t *testing.T) {
	base := map[string][]byte{"w": {0, 0, 0, 0}, "v": {1, 2}}
	cur := map[string][]byte{"w": {0, 5, 0, 6}, "v": {1, 3}}
	files := slimeTestDelta(t, 43, 0, []string{"w", "v"}, base, cur)
	shard := files["model-00000-of-00001.safetensors"]
	h, err := ParseHeader(shard, int64(len(shard)))
	if err != nil {
		t.Fatal(err)
	}
	wantMeta := map[string]string{"w": SlimeChecksum(cur["w"]), "v": SlimeChecksum(cur["v"])}
	if !reflect.DeepEqual(h.Metadata, wantMeta) {
		t.Errorf("shard metadata %v, want %v", h.Metadata, wantMeta)
	}
	s, err := OpenSlimeShard(bytes.NewReader(shard), int64(len(shard)))
	if err != nil {
		t.Fatal(err)
	}
	frame, _ := s.Frame("w")
	dec, _ := zstd.NewReader(nil)
	payload, err := dec.DecodeAll(frame, nil)
	want := []byte{2, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 5, 6}
	if err != nil || !bytes.Equal(payload, want) {
		t.Errorf("payload % x, want % x (%v)", payload, want, err)
	}
	// An empty delta is the index alone.
	empty := slimeTestDelta(t, 44, 0, []string{"w"}, cur, cur)
	if len(empty) != 1 || !strings.Contains(string(empty[SlimeIndexName]), `"weight_map": {}`) {
		t.Errorf("empty delta: %v", empty)
	}
}

func TestOpenSlimeShardErrors(t *testing.T) {
	meta := func(m map[string]string, ts ...Tensor) []byte {
		hdr, err := EncodeHeader(m, ts)
		if err != nil {
			t.Fatal(err)
		}
		return append(hdr, make([]byte, ts[len(ts)-1].End)...)
	}
	sum := SlimeChecksum(nil)
	tests := map[string][]byte{
		"extra metadata":   meta(map[string]string{"a": sum, "format": "pt"}, Tensor{Name: "a", DType: DTypeU8, Shape: []int64{3}}),
		"missing checksum": meta(map[string]string{"b": sum}, Tensor{Name: "a", DType: DTypeU8, Shape: []int64{3}}),
		"upper-case hex":   meta(map[string]string{"a": strings.ToUpper(sum)}, Tensor{Name: "a", DType: DTypeU8, Shape: []int64{3}}),
		"not U8":           meta(map[string]string{"a": sum}, Tensor{Name: "a", DType: DTypeI8, Shape: []int64{3}}),
		"2-D":              meta(map[string]string{"a": sum}, Tensor{Name: "a", DType: DTypeU8, Shape: []int64{3, 1}}),
	}
	for name, shard := range tests {
		if _, err := OpenSlimeShard(bytes.NewReader(shard), int64(len(shard))); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
