package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/weightfs/weightfs/delta"
)

// slimeInVersions are the two versions the slime-in tests go between: in v2 tensor a changes
// by about 1% (a delta), c by half (an anchor), b and sub/other.safetensors and config.json
// not at all (a slime delta carries tensors only).
func slimeInVersions(t testing.TB) (v1, v2 map[string][]byte, tensors1, tensors2 map[string][]byte) {
	rng := rand.New(rand.NewPCG(31, 2))
	a, b, c, o := bf16Like(rng, 40_000), bf16Like(rng, 30_000), bf16Like(rng, 20_000), bf16Like(rng, 10_000)
	a2, c2 := perturb(rng, a, 2, 0.01), perturb(rng, c, 2, 0.5)
	model := func(a, c []byte) []byte {
		return safetensorsFile(t,
			testTensor{"a", delta.DTypeBF16, []int64{200, 200}, a},
			testTensor{"b", delta.DTypeBF16, []int64{30_000}, b},
			testTensor{"c", delta.DTypeBF16, []int64{20_000}, c})
	}
	other := safetensorsFile(t, testTensor{"o", delta.DTypeBF16, []int64{10_000}, o})
	v1 = map[string][]byte{"model.safetensors": model(a, c), "sub/other.safetensors": other, "config.json": []byte(`{"x":1}`)}
	v2 = map[string][]byte{"model.safetensors": model(a2, c2), "sub/other.safetensors": other, "config.json": []byte(`{"x":1}`)}
	return v1, v2, map[string][]byte{"a": a, "b": b, "c": c, "o": o}, map[string][]byte{"a": a2, "b": b, "c": c2, "o": o}
}

// slimeSend builds a delta directory as slime's disk sender writes it (the same bytes, from
// this test's own code): each changed tensor's diff (overwrite: u32 count | u32 positions |
// new bytes; xor: new ^ old) zstd-compressed into a 1-D U8 tensor, one shard per group of
// tensors (one per rank) with the xxh3-128 of each new tensor in __metadata__, and the index
// as json.dumps writes it.
func slimeSend(t testing.TB, version uint64, encoding string, old, cur map[string][]byte, groups [][]string) map[string][]byte {
	enc, err := zstd.NewWriter(nil, zstd.WithSingleSegment(true))
	if err != nil {
		t.Fatal(err)
	}
	var shards [][]delta.Tensor
	var datas [][]byte
	var metas []map[string]string
	for _, g := range groups {
		var ts []delta.Tensor
		var data []byte
		meta := map[string]string{}
		for _, name := range g {
			o, n := old[name], cur[name]
			var diff []byte
			switch encoding {
			case delta.SlimeXOR:
				diff = make([]byte, len(n))
				for i := range n {
					diff[i] = n[i] ^ o[i]
				}
			default:
				var pos []byte
				var vals []byte
				for i := range n {
					if n[i] != o[i] {
						pos = binary.LittleEndian.AppendUint32(pos, uint32(i))
						vals = append(vals, n[i])
					}
				}
				if len(vals) == 0 {
					continue
				}
				diff = append(binary.LittleEndian.AppendUint32(nil, uint32(len(vals))), append(pos, vals...)...)
			}
			if bytes.Equal(o, n) {
				continue
			}
			frame := enc.EncodeAll(diff, nil)
			ts = append(ts, delta.Tensor{Name: name, DType: delta.DTypeU8, Shape: []int64{int64(len(frame))}})
			data = append(data, frame...)
			meta[name] = delta.SlimeChecksum(n)
		}
		if len(ts) > 0 {
			shards, datas, metas = append(shards, ts), append(datas, data), append(metas, meta)
		}
	}
	files := map[string][]byte{}
	weightMap := map[string]string{}
	for i, ts := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i, len(shards))
		hdr, err := delta.EncodeHeader(metas[i], ts)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = append(hdr, datas[i]...)
		for _, tn := range ts {
			weightMap[tn.Name] = name
		}
	}
	index, err := json.Marshal(map[string]any{"metadata": map[string]string{"version": fmt.Sprintf("%06d", version),
		"base_version": fmt.Sprintf("%06d", version-1), "delta_encoding": encoding, "compression_format": "zstd",
		"checksum_format": "xxh3-128"}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	files[delta.SlimeIndexName] = index
	return files
}

func slimeOpener(files map[string][]byte) SlimeShardOpener {
	return func(name string) (io.ReaderAt, int64, error) {
		b, ok := files[name]
		if !ok || name == delta.SlimeIndexName {
			return nil, 0, fs.ErrNotExist
		}
		return bytes.NewReader(b), int64(len(b)), nil
	}
}

// renderedSlime reads the delta of version v as s serves it in deltas/.
func renderedSlime(t testing.TB, s *Store, v uint64) map[string][]byte {
	t.Helper()
	plan, files, err := s.RenderSlime(v)
	if err != nil || plan.Kind != SlimeDelta {
		t.Fatalf("RenderSlime(%d) = %+v, %v", v, plan, err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		if f.Path != "" {
			out[f.Name] = readFile(t, f.Path)
		} else {
			out[f.Name] = f.Data
		}
	}
	return out
}

// TestCommitSlimeDeltaEqualsIngest: slime's delta checkpoint, in either encoding and in two
// shards, written into a store that holds its base seals the version with the manifest and
// objects a full ingest stores; it reads back its bytes and serves the same slime delta and
// patch as a store that ingested the version whole.
func TestCommitSlimeDeltaEqualsIngest(t *testing.T) {
	v1, v2, t1, t2 := slimeInVersions(t)
	a, patch := renderedPatch(t, v1, v2)
	wantDelta := renderedSlime(t, a, 2)
	want, _ := a.Version(2)
	for _, encoding := range []string{delta.SlimeOverwrite, delta.SlimeXOR} {
		t.Run(encoding, func(t *testing.T) {
			b, _ := newStore(t, Options{})
			commitTree(t, b, 1, v1)
			in := slimeSend(t, 2, encoding, t1, t2, [][]string{{"a", "b", "c"}, {"o"}})
			if len(in) != 2 { // the index and one shard: o did not change, so rank 1 writes none
				t.Fatalf("the sender wrote %d files", len(in))
			}
			info, err := b.CommitSlimeDelta(in[delta.SlimeIndexName], slimeOpener(in), 2)
			if err != nil {
				t.Fatal(err)
			}
			if info.Number != 2 || info.StoredBytes != want.StoredBytes || info.ChangedElems != want.ChangedElems || info.Files != want.Files {
				t.Fatalf("sealed %+v, a full ingest sealed %+v", info, want)
			}
			ma, mb := manifestOf(t, a, 2), manifestOf(t, b, 2)
			if !reflect.DeepEqual(ma.Files, mb.Files) || !reflect.DeepEqual(ma.Dirs, mb.Dirs) || ma.Previous != mb.Previous || ma.Stats != mb.Stats {
				t.Fatalf("manifest differs from the ingested one:\n%+v\n%+v", mb, ma)
			}
			for p, content := range v2 {
				mustEqualBytes(t, p, readWhole(t, b, 2, p), content)
			}
			if ka, kb := objectKinds(t, a), objectKinds(t, b); !reflect.DeepEqual(ka, kb) {
				t.Fatalf("objects %v, a full ingest stores %v", kb, ka)
			}
			got := renderedSlime(t, b, 2)
			if gk, wk := mapsKeys(got), mapsKeys(wantDelta); !slices.Equal(gk, wk) {
				t.Fatalf("delta files %v, want %v", mapsKeys(got), mapsKeys(wantDelta))
			}
			for name := range wantDelta {
				mustEqualBytes(t, "deltas/weight_v000002/"+name, got[name], wantDelta[name])
			}
			var again bytes.Buffer
			if _, err := b.WritePatch(2, &writerAtBuffer{&again}); err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, "patch of version 2", again.Bytes(), patch)
			if rep, err := b.Verify(nil); err != nil || len(rep.Damaged) != 0 {
				t.Fatalf("verify: %+v, %v", rep, err)
			}
		})
	}
	// What the store renders is what it takes: the rendered delta seals the same version.
	c, _ := newStore(t, Options{})
	commitTree(t, c, 1, v1)
	if _, err := c.CommitSlimeDelta(wantDelta[delta.SlimeIndexName], slimeOpener(wantDelta), 2); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(manifestOf(t, a, 2).Files, manifestOf(t, c, 2).Files) {
		t.Fatal("the rendered delta sealed another manifest")
	}
	// A delta where nothing changed is the index alone: the version equals its base.
	empty := slimeSend(t, 3, delta.SlimeXOR, t2, t2, [][]string{{"a", "b", "c", "o"}})
	if _, err := c.CommitSlimeDelta(empty[delta.SlimeIndexName], slimeOpener(empty), 3); err != nil {
		t.Fatal(err)
	}
	for p, content := range v2 {
		mustEqualBytes(t, p, readWhole(t, c, 3, p), content)
	}
}

func mapsKeys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestCommitSlimeDeltaRefusals: each kind of bad delta is refused with ErrBadPatch naming
// what is wrong, and leaves the store as it was; the good delta then commits.
func TestCommitSlimeDeltaRefusals(t *testing.T) {
	v1, _, t1, t2 := slimeInVersions(t)
	s, _ := newStore(t, Options{})
	commitTree(t, s, 1, v1)
	send := func(encoding string, cur map[string][]byte) map[string][]byte {
		return slimeSend(t, 2, encoding, t1, cur, [][]string{{"a", "b", "c", "o"}})
	}
	shard := "model-00000-of-00001.safetensors"
	with := func(cur map[string][]byte, name string, b []byte) map[string][]byte {
		out := maps2(cur)
		out[name] = b
		return out
	}
	bad := map[string]struct {
		files map[string][]byte
		v     uint64
		want  string
	}{
		"another version's name": {send(delta.SlimeOverwrite, t2), 3, "its version is 000002, its directory says 3"},
		"base not the latest":    {slimeSend(t, 3, delta.SlimeXOR, t1, t2, [][]string{{"a"}}), 3, "base_version is 000002, the latest version is 1"},
		"xxh3 mismatch":          {with(send(delta.SlimeXOR, t2), delta.SlimeIndexName, nil), 2, ""}, // replaced below
		"a tensor the base lacks": {slimeSend(t, 2, delta.SlimeOverwrite, map[string][]byte{"zz": t1["a"]}, map[string][]byte{"zz": t2["a"]}, [][]string{{"zz"}}), 2,
			"tensor zz: version 1 has no such tensor"},
		"another size (xor)": {slimeSend(t, 2, delta.SlimeXOR, map[string][]byte{"a": t1["a"][:100]}, map[string][]byte{"a": t2["a"][:100]}, [][]string{{"a"}}), 2,
			"xor frame holds 100 bytes, the tensor has 80000"},
		"positions outside the tensor": {slimeSend(t, 2, delta.SlimeOverwrite, map[string][]byte{"o": append(bytes.Clone(t1["o"]), 0, 0)},
			map[string][]byte{"o": append(bytes.Clone(t1["o"]), 1, 1)}, [][]string{{"o"}}), 2, "not ascending within 20000 bytes"},
		"truncated shard":  {nil, 2, "shard model-00000-of-00001.safetensors"},
		"missing shard":    {nil, 2, "the directory has no such file"},
		"unknown encoding": {nil, 2, "delta_encoding"},
	}
	good := send(delta.SlimeOverwrite, t2)
	// The checksum of a: that of the old bytes (the delta would apply to another base).
	wrongSum := maps2(good)
	wrongSum[shard] = bytes.Replace(good[shard], []byte(delta.SlimeChecksum(t2["a"])), []byte(delta.SlimeChecksum(t1["a"])), 1)
	bad["xxh3 mismatch"] = struct {
		files map[string][]byte
		v     uint64
		want  string
	}{wrongSum, 2, "tensor a: xxh3-128 after the delta is " + delta.SlimeChecksum(t2["a"])}
	set := func(name string, files map[string][]byte) {
		c := bad[name]
		c.files = files
		bad[name] = c
	}
	set("truncated shard", with(good, shard, good[shard][:len(good[shard])-7]))
	missing := maps2(good)
	delete(missing, shard)
	set("missing shard", missing)
	set("unknown encoding", with(good, delta.SlimeIndexName, bytes.Replace(good[delta.SlimeIndexName], []byte(`"overwrite"`), []byte(`"bitflip"`), 1)))

	before := objectKinds(t, s)
	for name, c := range bad {
		_, err := s.CommitSlimeDelta(c.files[delta.SlimeIndexName], slimeOpener(c.files), c.v)
		if !errors.Is(err, ErrBadPatch) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want ErrBadPatch with %q", name, err, c.want)
		}
		if latest, _ := s.Latest(); latest != 1 || len(s.Versions()) != 1 {
			t.Fatalf("%s: the store now has versions %v", name, s.Versions())
		}
	}
	if _, err := s.CommitSlimeDelta(good[delta.SlimeIndexName], slimeOpener(good), 2); err != nil {
		t.Fatal(err)
	}
	if after := objectKinds(t, s); reflect.DeepEqual(after, before) {
		t.Fatalf("the good delta stored no object: %v", after)
	}
}

func maps2(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestCommitSlimeDeltaOnSeed: slime's first delta (base_version 000000) applied to the seed
// checkpoint on disk seals the store's first version, equal to a full ingest of the same
// files; a delta for another seed, a store that holds versions, or a base other than the seed
// are refused, and nothing is sealed.
func TestCommitSlimeDeltaOnSeed(t *testing.T) {
	v1, v2, t1, t2 := slimeInVersions(t)
	seed := t.TempDir()
	for p, b := range v1 {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(seed, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(seed, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full, _ := newStore(t, Options{})
	commitTree(t, full, 1, v2)
	in := slimeSend(t, 1, delta.SlimeXOR, t1, t2, [][]string{{"a", "b"}, {"c", "o"}})

	s, _ := newStore(t, Options{})
	wrong := slimeSend(t, 1, delta.SlimeXOR, t2, t1, [][]string{{"a", "b", "c", "o"}}) // the delta back from v2
	if _, err := s.CommitSlimeDeltaOnSeed(seed, wrong[delta.SlimeIndexName], slimeOpener(wrong), 1); !errors.Is(err, ErrBadPatch) ||
		!strings.Contains(err.Error(), "xxh3-128 after the delta is") {
		t.Fatalf("a delta for another seed: %v", err)
	}
	second := slimeSend(t, 2, delta.SlimeXOR, t1, t2, [][]string{{"a"}})
	if _, err := s.CommitSlimeDeltaOnSeed(seed, second[delta.SlimeIndexName], slimeOpener(second), 2); !errors.Is(err, ErrBadPatch) ||
		!strings.Contains(err.Error(), "not the seed 000000") {
		t.Fatalf("a delta from version 1 on the seed: %v", err)
	}
	if _, err := s.CommitSlimeDelta(in[delta.SlimeIndexName], slimeOpener(in), 1); !errors.Is(err, ErrBadPatch) {
		t.Fatalf("the first delta without its seed: %v", err)
	}
	if len(s.Versions()) != 0 {
		t.Fatalf("versions %v after refusals", s.Versions())
	}
	info, err := s.CommitSlimeDeltaOnSeed(seed, in[delta.SlimeIndexName], slimeOpener(in), 1)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := full.Version(1)
	if info.Number != 1 || info.StoredBytes != want.StoredBytes || info.Files != want.Files {
		t.Fatalf("sealed %+v, a full ingest sealed %+v", info, want)
	}
	if ma, mb := manifestOf(t, full, 1), manifestOf(t, s, 1); !reflect.DeepEqual(ma.Files, mb.Files) || !reflect.DeepEqual(ma.Dirs, mb.Dirs) {
		t.Fatalf("manifest differs from the ingested one:\n%+v\n%+v", mb, ma)
	}
	for p, content := range v2 {
		mustEqualBytes(t, p, readWhole(t, s, 1, p), content)
	}
	if _, err := s.CommitSlimeDeltaOnSeed(seed, in[delta.SlimeIndexName], slimeOpener(in), 1); !errors.Is(err, ErrBadPatch) ||
		!strings.Contains(err.Error(), "holds versions already") {
		t.Fatalf("the seed's delta again: %v", err)
	}
}

// TestSlimeVersionsLikeAnyOther (issue 31 item 5): versions that came in as slime deltas
// verify clean, serve the catch-up patches and slime deltas of a store that ingested them
// whole, and gc keeps and drops them as it does the others.
func TestSlimeVersionsLikeAnyOther(t *testing.T) {
	versions, tensors := deltaInSeries(t, 5)
	a, _ := newStore(t, Options{})
	commitAll(t, a, versions)
	b, _ := newStore(t, Options{})
	commitTree(t, b, 1, versions[0])
	for v := uint64(2); v <= 5; v++ {
		encoding := []string{delta.SlimeOverwrite, delta.SlimeXOR}[v%2]
		in := slimeSend(t, v, encoding, tensors[v-2], tensors[v-1], [][]string{{"a"}, {"b"}})
		if _, err := b.CommitSlimeDelta(in[delta.SlimeIndexName], slimeOpener(in), v); err != nil {
			t.Fatalf("delta to version %d: %v", v, err)
		}
	}
	if rep, err := b.Verify(nil); err != nil || len(rep.Damaged) != 0 || rep.Versions != 5 {
		t.Fatalf("verify of the store whose versions came as slime deltas: %+v %v", rep, err)
	}
	mustEqualBytes(t, "catch-up patch 1 -> 5", catchupPatch(t, b, 5, 1), catchupPatch(t, a, 5, 1))
	mustEqualBytes(t, "catch-up patch 3 -> 5", catchupPatch(t, b, 5, 3), catchupPatch(t, a, 5, 3))
	for v := uint64(2); v <= 5; v++ {
		da, db := renderedSlime(t, a, v), renderedSlime(t, b, v)
		if !reflect.DeepEqual(da, db) {
			t.Fatalf("slime delta of version %d differs from the fully ingested store's", v)
		}
	}
	for _, s := range []*Store{a, b} {
		if _, err := s.GC(2); err != nil {
			t.Fatal(err)
		}
	}
	if va, vb := a.Versions(), b.Versions(); len(va) != 2 || len(vb) != 2 || va[0].Number != vb[0].Number {
		t.Fatalf("after gc: %v and %v", vb, va)
	}
	for _, v := range []uint64{4, 5} {
		mustEqualBytes(t, "version after gc", readWhole(t, b, v, "model.safetensors"), versions[v-1]["model.safetensors"])
	}
	if rep, err := b.Verify(nil); err != nil || len(rep.Damaged) != 0 {
		t.Fatalf("verify after gc: %+v %v", rep, err)
	}
}

// TestCommitSlimeDeltaCrash: a crash at any point of the seal from a slime delta leaves
// either no version 2 or all of it, no unreferenced object after the reopen, and the delta
// then commits.
func TestCommitSlimeDeltaCrash(t *testing.T) {
	v1, v2, t1, t2 := slimeInVersions(t)
	in := slimeSend(t, 2, delta.SlimeXOR, t1, t2, [][]string{{"a", "b", "c", "o"}})
	for _, point := range []string{"seal-objects-written", "seal-objects-synced", "seal-manifest-written"} {
		t.Run(point, func(t *testing.T) {
			s, root := newStore(t, Options{})
			commitTree(t, s, 1, v1)
			s.hook = func(p string) error {
				if p == point {
					return errInjected
				}
				return nil
			}
			if _, err := s.CommitSlimeDelta(in[delta.SlimeIndexName], slimeOpener(in), 2); !errors.Is(err, errInjected) {
				t.Fatalf("commit with a failure at %s: %v", point, err)
			}
			crash(s)
			s = openStore(t, root, Options{})
			sealed := point == "seal-manifest-written"
			if s.versions.isSealed(2) != sealed {
				t.Fatalf("after a crash at %s: version 2 sealed %v", point, !sealed)
			}
			s.writeMu.Lock()
			n, _, err := s.collector.sweepLocked()
			s.writeMu.Unlock()
			if err != nil || n != 0 {
				t.Fatalf("after reopen, a sweep still finds %d unreferenced objects (%v)", n, err)
			}
			if !sealed {
				if _, err := s.CommitSlimeDelta(in[delta.SlimeIndexName], slimeOpener(in), 2); err != nil {
					t.Fatal(err)
				}
			}
			for p, content := range v2 {
				mustEqualBytes(t, p, readWhole(t, s, 2, p), content)
			}
		})
	}
}
