package fs

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/store"
)

// slimeRank is what one rank of slime's disk sender writes for a version: the shard of its
// changed tensors (each the zstd frame of its diff as a 1-D U8 tensor, the xxh3-128 of its new
// bytes in __metadata__), or nothing when none changed. The test's own code, after the format.
func slimeRank(t *testing.T, encoding string, old, cur map[string][]byte, names []string) (map[string]string, []delta.Tensor, []byte) {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithSingleSegment(true))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	var tensors []delta.Tensor
	var data []byte
	for _, name := range names {
		o, n := old[name], cur[name]
		if bytes.Equal(o, n) {
			continue
		}
		var diff []byte
		if encoding == delta.SlimeXOR {
			diff = make([]byte, len(n))
			for i := range n {
				diff[i] = n[i] ^ o[i]
			}
		} else {
			var pos, vals []byte
			for i := range n {
				if n[i] != o[i] {
					pos = binary.LittleEndian.AppendUint32(pos, uint32(i))
					vals = append(vals, n[i])
				}
			}
			diff = append(binary.LittleEndian.AppendUint32(nil, uint32(len(vals))), append(pos, vals...)...)
		}
		frame := enc.EncodeAll(diff, nil)
		tensors = append(tensors, delta.Tensor{Name: name, DType: delta.DTypeU8, Shape: []int64{int64(len(frame))}})
		data = append(data, frame...)
		sums[name] = delta.SlimeChecksum(n)
	}
	return sums, tensors, data
}

// atomicWrite is slime's _atomic_write: NAME.tmp opened, written, flushed, fsynced, closed,
// and os.replace'd onto NAME.
func atomicWrite(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// slimeSendVersion publishes version v into dir as slime's sender does: every source rank
// makes the version's directory (exist_ok), each rank with changed tensors writes its shard
// (numbered over the ranks that have one), and rank 0 writes the index last.
func slimeSendVersion(t *testing.T, dir string, v uint64, encoding string, old, cur map[string][]byte, ranks [][]string) error {
	t.Helper()
	vdir := filepath.Join(dir, fmt.Sprintf("weight_v%06d", v))
	for range ranks {
		if err := os.MkdirAll(vdir, 0o777); err != nil {
			return err
		}
	}
	type shard struct {
		sums    map[string]string
		tensors []delta.Tensor
		data    []byte
	}
	var shards []shard
	for _, names := range ranks {
		if sums, tensors, data := slimeRank(t, encoding, old, cur, names); len(tensors) > 0 {
			shards = append(shards, shard{sums, tensors, data})
		}
	}
	weightMap := map[string]string{}
	for i, s := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i, len(shards))
		hdr, err := delta.EncodeHeader(s.sums, s.tensors)
		if err != nil {
			t.Fatal(err)
		}
		if err := atomicWrite(filepath.Join(vdir, name), append(hdr, s.data...)); err != nil {
			return err
		}
		for _, tn := range s.tensors {
			weightMap[tn.Name] = name
		}
	}
	index, err := json.Marshal(map[string]any{"metadata": map[string]string{"version": fmt.Sprintf("%06d", v),
		"base_version": fmt.Sprintf("%06d", v-1), "delta_encoding": encoding, "compression_format": "zstd",
		"checksum_format": "xxh3-128"}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	return atomicWrite(filepath.Join(vdir, delta.SlimeIndexName), index)
}

// TestSlimeDeltaIn: slime's disk sender pointed at MNT/deltas of an empty store mounted with
// its seed (its rmtree and makedirs at the start of a run, then each version's directory,
// shards and index, with the same calls in the same order) seals each version, the first on
// the seed; the versions read back the checkpoint's bytes, and their deltas/ are
// byte-identical to those of a store that ingested the checkpoints whole. A
// delta from another base is refused at the index's rename with EINVAL, seals nothing, and
// says why in weight_vNNNNNN.rejected.
func TestSlimeDeltaIn(t *testing.T) {
	newStore := func() *store.Store { return newEmptyStore(t) }
	commit := func(st *store.Store, v uint64, files map[string][]byte) {
		dir := t.TempDir()
		for p, b := range files {
			writeFile(t, filepath.Join(dir, p), b)
		}
		if _, err := st.Commit(dir, store.CommitOptions{Version: v}); err != nil {
			t.Fatal(err)
		}
	}
	seedTensors := map[string][]byte{"w": pattern(1, 8192), "norm": pattern(2, 64), "head": pattern(3, 2048)}
	step := func(prev map[string][]byte, flips ...int) map[string][]byte {
		next := map[string][]byte{}
		for k, b := range prev {
			next[k] = bytes.Clone(b)
		}
		next["w"][flips[0]] ^= 1
		next["w"][flips[1]] ^= 0x80
		next["norm"][flips[2]%64] ^= 4
		return next
	}
	// tensors[0] is slime's seed (000000, its --hf-checkpoint); tensors[v] its version v.
	tensors := []map[string][]byte{seedTensors}
	for v := 1; v <= 3; v++ {
		tensors = append(tensors, step(tensors[v-1], 100*v, 5001+v, 3*v))
	}
	checkpoint := func(ts map[string][]byte) map[string][]byte {
		return map[string][]byte{
			"model.safetensors":   viewSafetensors(t, viewTensor{"w", []int64{4096}, ts["w"]}, viewTensor{"norm", []int64{32}, ts["norm"]}),
			"lm/head.safetensors": viewSafetensors(t, viewTensor{"head", []int64{1024}, ts["head"]}),
			"config.json":         []byte(`{"step": 0}`),
		}
	}
	full := newStore()
	for v := 1; v <= 3; v++ {
		commit(full, uint64(v), checkpoint(tensors[v]))
	}
	seed := t.TempDir()
	for p, b := range checkpoint(seedTensors) {
		writeFile(t, filepath.Join(seed, p), b)
	}
	st := newStore() // empty: slime's first delta builds on the seed
	mnt, _ := mountTest(t, FromStore(st), Options{SlimeSeed: seed})
	deltas := filepath.Join(mnt, "deltas")

	// The start of a run: rmtree(ignore_errors) and makedirs(exist_ok) of the delta dir.
	_ = os.RemoveAll(deltas)
	if err := os.MkdirAll(deltas, 0o777); err != nil {
		t.Fatal(err)
	}
	ranks := [][]string{{"w", "norm"}, {"head"}}
	for v, encoding := range []string{"", delta.SlimeOverwrite, delta.SlimeXOR, delta.SlimeXOR} {
		if v == 0 {
			continue
		}
		if err := slimeSendVersion(t, deltas, uint64(v), encoding, tensors[v-1], tensors[v], ranks); err != nil {
			t.Fatalf("send version %d (%s): %v", v, encoding, err)
		}
		for p, b := range checkpoint(tensors[v]) {
			got, err := os.ReadFile(filepath.Join(mnt, VersionName(uint64(v)), p))
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("%s/%s after the delta: %v (%d bytes, want %d)", VersionName(uint64(v)), p, err, len(got), len(b))
			}
		}
		if v == 1 {
			// The store's first version: deltas/ serves it whole (slime's /pull_weights copies it).
			if got := listDir(t, filepath.Join(deltas, VersionName(1))); got != "config.json model.safetensors" {
				t.Fatalf("deltas/%s lists %q", VersionName(1), got)
			}
			continue
		}
		_, want, err := full.RenderSlime(uint64(v))
		if err != nil || len(want) < 2 {
			t.Fatalf("the fully ingested store's delta %d: %v %+v", v, err, want)
		}
		var names []string
		for _, f := range want {
			names = append(names, f.Name)
			wb, err := os.ReadFile(f.Path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(deltas, VersionName(uint64(v)), f.Name))
			if err != nil || !bytes.Equal(got, wb) {
				t.Fatalf("deltas/%s/%s: %v; differs from the fully ingested store's", VersionName(uint64(v)), f.Name, err)
			}
		}
		sort.Strings(names)
		if got := listDir(t, filepath.Join(deltas, VersionName(uint64(v)))); got != strings.Join(names, " ") {
			t.Fatalf("deltas/%s lists %q, want %q", VersionName(uint64(v)), got, strings.Join(names, " "))
		}
	}

	// Version 4 diffed against version 2's weights: the xxh3 of the result fails at the
	// index's rename; nothing is sealed and the note says why.
	err := slimeSendVersion(t, deltas, 4, delta.SlimeXOR, tensors[2], step(tensors[2], 1, 2, 3), ranks)
	wantErrno(t, "rename the index of a delta from another base", err, syscall.EINVAL)
	note, err := os.ReadFile(filepath.Join(deltas, VersionName(4)+rejectedSuffix))
	if err != nil || !strings.Contains(string(note), "xxh3-128 after the delta is") {
		t.Fatalf("the note of the refused delta: %v: %s", err, note)
	}
	_, err = os.Stat(filepath.Join(deltas, VersionName(4)))
	wantErrno(t, "stat the refused delta's directory", err, syscall.ENOENT)
	if latest, _ := st.Latest(); latest != 3 {
		t.Fatalf("latest %d after a refused delta", latest)
	}
	// A sealed version's directory stays; a name that is no version is refused.
	wantErrno(t, "rmdir a sealed version's delta", os.Remove(filepath.Join(deltas, VersionName(3))), syscall.EPERM)
	wantErrno(t, "mkdir deltas/x", os.Mkdir(filepath.Join(deltas, "x"), 0o755), syscall.EPERM)
}
