package tests

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/gen"
)

// A receiver of slime's disk delta weight sync, written from docs/format.md Part III §4 alone (not from
// package delta): it keeps a model's safetensors files in memory, pulls a directory of
// MNT/deltas/ as either a full checkpoint or an overwrite delta, and checks every rule of the
// layout on the way.

// stEntry is one tensor of a safetensors header.
type stEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// parseSafetensors returns the tensors (offsets made absolute), the metadata and the data
// start of a safetensors file.
func parseSafetensors(b []byte) (map[string]stEntry, map[string]string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("%d bytes", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("header of %d bytes in a %d-byte file", n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, nil, err
	}
	tensors := map[string]stEntry{}
	var meta map[string]string
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, nil, fmt.Errorf("__metadata__: %v", err)
			}
			continue
		}
		var e stEntry
		if err := json.Unmarshal(msg, &e); err != nil || len(e.Offsets) != 2 {
			return nil, nil, fmt.Errorf("tensor %s: %v", name, err)
		}
		e.Offsets[0] += 8 + int64(n)
		e.Offsets[1] += 8 + int64(n)
		if e.Offsets[0] > e.Offsets[1] || e.Offsets[1] > int64(len(b)) {
			return nil, nil, fmt.Errorf("tensor %s runs past the file", name)
		}
		tensors[name] = e
	}
	return tensors, meta, nil
}

// slimeReceiver is the model an engine holds: every safetensors file's bytes, and where each
// tensor is in them.
type slimeReceiver struct {
	files   map[string][]byte
	tensors map[string]receiverTensor
}

type receiverTensor struct {
	file       string
	begin, end int64
}

// fullPull loads every *.safetensors of dir.
func fullPull(t *testing.T, dir string) *slimeReceiver {
	t.Helper()
	r := &slimeReceiver{files: map[string][]byte{}, tensors: map[string]receiverTensor{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".safetensors") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		tensors, _, err := parseSafetensors(b)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		r.files[e.Name()] = b
		for name, te := range tensors {
			r.tensors[name] = receiverTensor{e.Name(), te.Offsets[0], te.Offsets[1]}
		}
	}
	return r
}

// hashes maps each held file to its SHA-256.
func (r *slimeReceiver) hashes() map[string]string {
	out := map[string]string{}
	for name, b := range r.files {
		sum := sha256.Sum256(b)
		out[name] = hex.EncodeToString(sum[:])
	}
	return out
}

var shardName = regexp.MustCompile(`^model-(\d{5})-of-(\d{5})\.safetensors$`)

// pull applies deltas/weight_vNNNNNN (dir) as version v and says what it was: "full" (then
// r is replaced by a full pull) or "delta" with the number of tensors it overwrote.
func (r *slimeReceiver) pull(t *testing.T, dir string, v int) (kind string, changed int) {
	t.Helper()
	indexBytes, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	var index map[string]json.RawMessage
	if err == nil {
		if err := json.Unmarshal(indexBytes, &index); err != nil {
			t.Fatalf("v%d: index: %v", v, err)
		}
	}
	var meta map[string]any
	if index != nil {
		if err := json.Unmarshal(index["metadata"], &meta); err != nil {
			t.Fatalf("v%d: index metadata: %v", v, err)
		}
	}
	if _, isDelta := meta["delta_encoding"]; !isDelta {
		*r = *fullPull(t, dir)
		return "full", 0
	}

	// The index: exactly metadata and weight_map; exactly five string metadata keys.
	if len(index) != 2 || index["weight_map"] == nil {
		t.Fatalf("v%d: index has keys other than metadata and weight_map: %s", v, indexBytes)
	}
	wantMeta := map[string]string{
		"version": fmt.Sprintf("%06d", v), "base_version": fmt.Sprintf("%06d", v-1),
		"delta_encoding": "overwrite", "compression_format": "zstd", "checksum_format": "xxh3-128",
	}
	if len(meta) != len(wantMeta) {
		t.Fatalf("v%d: index metadata has %d keys, want 5: %s", v, len(meta), indexBytes)
	}
	for k, want := range wantMeta {
		if got, ok := meta[k].(string); !ok || got != want {
			t.Fatalf("v%d: index metadata %s = %#v, want %q", v, k, meta[k], want)
		}
	}
	var weightMap map[string]string
	if err := json.Unmarshal(index["weight_map"], &weightMap); err != nil {
		t.Fatalf("v%d: weight_map: %v", v, err)
	}

	// The directory holds the index and the shards it names, nothing else; shard names are
	// model-{offset:05d}-of-{total:05d}.safetensors with offsets 0..total-1.
	shards := map[string][]string{}
	for name, shard := range weightMap {
		shards[shard] = append(shards[shard], name)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1+len(shards) {
		t.Fatalf("v%d: the delta directory holds %d entries, want the index and %d shards", v, len(ents), len(shards))
	}
	offsets := map[int]bool{}
	for shard := range shards {
		m := shardName.FindStringSubmatch(shard)
		if m == nil {
			t.Fatalf("v%d: shard name %q", v, shard)
		}
		off, _ := strconv.Atoi(m[1])
		total, _ := strconv.Atoi(m[2])
		if total != len(shards) || off >= total || offsets[off] {
			t.Fatalf("v%d: shard %s among %d shards", v, shard, len(shards))
		}
		offsets[off] = true
	}

	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	for shard, names := range shards {
		b, err := os.ReadFile(filepath.Join(dir, shard))
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		tensors, sums, err := parseSafetensors(b)
		if err != nil {
			t.Fatalf("v%d: %s: %v", v, shard, err)
		}
		// The shard holds exactly the tensors the index maps to it, and its metadata
		// exactly their checksums.
		sort.Strings(names)
		if len(tensors) != len(names) || len(sums) != len(names) {
			t.Fatalf("v%d: %s holds %d tensors and %d checksums, the index maps %d to it", v, shard, len(tensors), len(sums), len(names))
		}
		for _, name := range names {
			te, ok := tensors[name]
			if !ok || te.DType != "U8" || len(te.Shape) != 1 || te.Shape[0] != te.Offsets[1]-te.Offsets[0] {
				t.Fatalf("v%d: %s: tensor %s is %+v, want a 1-D U8 tensor", v, shard, name, te)
			}
			r.overwrite(t, v, name, b[te.Offsets[0]:te.Offsets[1]], sums[name], dec)
		}
	}
	return "delta", len(weightMap)
}

// overwrite decodes one tensor's frame and applies it: u32le count | count u32le byte
// positions (ascending) | count new bytes, then checks the xxh3-128 of the result.
func (r *slimeReceiver) overwrite(t *testing.T, v int, name string, frame []byte, checksum string, dec *zstd.Decoder) {
	t.Helper()
	var h zstd.Header
	if err := h.Decode(frame); err != nil || !h.HasFCS {
		t.Fatalf("v%d: %s: frame header %+v, %v: want a frame with its content size", v, name, h, err)
	}
	payload, err := dec.DecodeAll(frame, nil)
	if err != nil {
		t.Fatalf("v%d: %s: decode: %v", v, name, err)
	}
	if uint64(len(payload)) != h.FrameContentSize {
		t.Fatalf("v%d: %s: %d payload bytes, the frame declares %d (more than one frame?)", v, name, len(payload), h.FrameContentSize)
	}
	if len(payload) < 4 {
		t.Fatalf("v%d: %s: payload of %d bytes", v, name, len(payload))
	}
	count := int(binary.LittleEndian.Uint32(payload))
	if count < 1 || len(payload) != 4+5*count {
		t.Fatalf("v%d: %s: count %d in a payload of %d bytes", v, name, count, len(payload))
	}
	loc, ok := r.tensors[name]
	if !ok {
		t.Fatalf("v%d: the delta overwrites %s, which the model does not have", v, name)
	}
	raw := r.files[loc.file][loc.begin:loc.end]
	newBytes := payload[4+4*count:]
	prev := int64(-1)
	for i := 0; i < count; i++ {
		pos := int64(binary.LittleEndian.Uint32(payload[4+4*i:]))
		if pos <= prev || pos >= int64(len(raw)) {
			t.Fatalf("v%d: %s: position %d after %d in a tensor of %d bytes", v, name, pos, prev, len(raw))
		}
		raw[pos] = newBytes[i]
		prev = pos
	}
	sum := xxh3.Hash128(raw).Bytes()
	if got := hex.EncodeToString(sum[:]); got != checksum {
		t.Fatalf("v%d: %s: xxh3-128 %s after the overwrite, the shard says %s", v, name, got, checksum)
	}
}

// safetensorsHashes keeps the *.safetensors entries of a version's hashes.
func safetensorsHashes(all map[string]string) map[string]string {
	out := map[string]string{}
	for name, sum := range all {
		if !strings.Contains(name, "/") && strings.HasSuffix(name, ".safetensors") {
			out[name] = sum
		}
	}
	return out
}

// replaySlimeChain starts from a full pull of the exported version first-1 and pulls
// MNT/deltas/weight_vNNNNNN for every number up to last; each is a delta, and afterwards the
// model's files hash as the version's.
func replaySlimeChain(t *testing.T, mnt, base string, want map[int]map[string]string, first, last int) {
	t.Helper()
	r := fullPull(t, base)
	sameHashes(t, "full pull", r.hashes(), safetensorsHashes(want[first-1]))
	for v := first; v <= last; v++ {
		kind, changed := r.pull(t, filepath.Join(mnt, "deltas", fmt.Sprintf("weight_v%06d", v)), v)
		if kind != "delta" || changed == 0 {
			t.Fatalf("v%d is a %s with %d changed tensors, want a delta", v, kind, changed)
		}
		sameHashes(t, fmt.Sprintf("after the delta of v%d", v), r.hashes(), safetensorsHashes(want[v]))
		if t.Failed() {
			return
		}
	}
}

// TestSlimeDeltaCases seals versions through a mount that hit every case of docs/format.md Part III §5 and
// pulls every number from 1 to 9 with the receiver, through a read-write and a read-only
// mount: v1 (first: full), v2 and v5 (deltas; 3 and 4 are empty deltas, looked up but not
// listed, and v5 is labelled base 4), v6 (config.json changed: full), v7 (another model:
// full, no patch), v8 (nothing changed: the index alone) and v9 (a delta again).
func TestSlimeDeltaCases(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	rw, ro := rwAndROMountPoints(t, work)
	startMount(t, storeDir, rw)

	small, err := gen.Preset("small", 3e-6, 5)
	if err != nil {
		t.Fatal(err)
	}
	tiny, err := gen.Preset("tiny", 3e-6, 6)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := gen.New(small)
	if err != nil {
		t.Fatal(err)
	}
	mt, err := gen.New(tiny)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]map[string]string{}
	seal := func(v int, m *gen.Model, edit func(dir string)) {
		src := srcDir(work, v)
		if err := m.WriteCheckpoint(src); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(src)
		}
		want[v] = treeHashes(t, src)
		run(t, "cp", "-r", src, versionDir(rw, v))
		run(t, "touch", filepath.Join(versionDir(rw, v), "DONE"))
	}
	seal(1, ms, nil)
	ms.Step()
	seal(2, ms, nil)
	ms.Step()
	seal(5, ms, nil)
	ms.Step()
	seal(6, ms, func(dir string) {
		p := filepath.Join(dir, "config.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	seal(7, mt, nil)
	seal(8, mt, nil)
	mt.Step()
	seal(9, mt, nil)
	for _, v := range []int{3, 4} {
		want[v] = want[2]
	}

	startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"))
	for _, mnt := range []string{rw, ro} {
		if got, want := rootListing(t, filepath.Join(mnt, "deltas")), "weight_v000001 weight_v000002 weight_v000005 weight_v000006 weight_v000007 weight_v000008 weight_v000009"; got != want {
			t.Errorf("ls %s/deltas: %q, want %q", mnt, got, want)
		}
		if got, want := rootListing(t, filepath.Join(mnt, "patches")), "weight_v000002.safetensors weight_v000005.safetensors weight_v000006.safetensors weight_v000008.safetensors weight_v000009.safetensors"; got != want {
			t.Errorf("ls %s/patches: %q, want %q", mnt, got, want)
		}
		for _, name := range []string{"deltas/weight_v000010", "deltas/weight_v000000", "patches/" + patchName(7), "patches/" + patchName(3)} {
			if _, err := os.Stat(filepath.Join(mnt, name)); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("stat %s/%s: %v, want ENOENT", mnt, name, err)
			}
		}

		r := fullPull(t, filepath.Join(mnt, "deltas", "weight_v000001"))
		sameHashes(t, "deltas/weight_v000001", sha256sumTree(t, filepath.Join(mnt, "deltas", "weight_v000001")), want[1])
		wantKinds := map[int]string{2: "delta", 3: "delta", 4: "delta", 5: "delta", 6: "full", 7: "full", 8: "delta", 9: "delta"}
		for v := 2; v <= 9; v++ {
			dir := filepath.Join(mnt, "deltas", fmt.Sprintf("weight_v%06d", v))
			kind, changed := r.pull(t, dir, v)
			if kind != wantKinds[v] {
				t.Errorf("%s: a %s, want a %s", dir, kind, wantKinds[v])
			}
			switch {
			case kind == "full":
				sameHashes(t, dir, sha256sumTree(t, dir), topLevel(want[v]))
			case v == 3 || v == 4 || v == 8:
				if changed != 0 || rootListing(t, dir) != "model.safetensors.index.json" {
					t.Errorf("%s: %d changed tensors, listing %q; want the index alone", dir, changed, rootListing(t, dir))
				}
			case changed == 0:
				t.Errorf("%s: a delta that changes nothing", dir)
			}
			sameHashes(t, fmt.Sprintf("%s: the model after it", dir), r.hashes(), safetensorsHashes(want[v]))
		}
	}

	// weightfs patch refuses what the mount does not serve, saying why.
	if r := runCLI(t, "patch", storeDir, "7", "-o", filepath.Join(work, "p7")); r.code == 0 || !strings.Contains(r.stderr, "layout changed") {
		t.Errorf("weightfs patch of a re-anchored version: exit %d, %q; want a failure naming the layout change", r.code, r.stderr)
	}

	// The patch of v6 carries config.json whole; weightfs apply brings an export of v5 to v6.
	dir := filepath.Join(work, "v5")
	mustCLI(t, "export", storeDir, "5", dir)
	patch6 := filepath.Join(rw, "patches", patchName(6))
	sparse, whole := patchFiles(t, patch6)
	if len(whole) != 1 || whole[0] != "config.json" || len(sparse) == 0 {
		t.Fatalf("patch of v6: in place %v, whole %v; want config.json whole", sparse, whole)
	}
	for _, name := range append(sparse, whole...) {
		mustCLI(t, "apply", patch6, filepath.Join(dir, name))
	}
	sameHashes(t, "v5 + patch of v6", treeHashes(t, dir), want[6])
}

// topLevel keeps the entries of a version's hashes that are not in a subdirectory.
func topLevel(all map[string]string) map[string]string {
	out := map[string]string{}
	for name, sum := range all {
		if !strings.Contains(name, "/") {
			out[name] = sum
		}
	}
	return out
}
