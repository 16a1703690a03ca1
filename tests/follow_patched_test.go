package tests

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/store"
)

// deltaInVersions are n small versions: model.safetensors of two BF16 tensors, a changing in
// a few bytes every version and b every other one, and config.json, the same throughout.
func deltaInVersions(t *testing.T, n int) []map[string][]byte {
	rng := rand.New(rand.NewPCG(31, 5))
	tensors := []delta.Tensor{{Name: "a", DType: delta.DTypeBF16, Shape: []int64{128, 64}}, {Name: "b", DType: delta.DTypeBF16, Shape: []int64{64, 32}}}
	hdr, err := delta.EncodeHeader(nil, tensors)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, tensors[1].End)
	for i := range data {
		data[i] = byte(rng.UintN(256))
	}
	var out []map[string][]byte
	for v := 1; v <= n; v++ {
		if v > 1 {
			for range 40 {
				data[rng.Int64N(tensors[0].End)] ^= byte(1 + rng.UintN(255))
			}
			if v%2 == 1 {
				for range 20 {
					data[tensors[1].Begin+rng.Int64N(tensors[1].End-tensors[1].Begin)] ^= byte(1 + rng.UintN(255))
				}
			}
		}
		out = append(out, map[string][]byte{
			"model.safetensors": append(append([]byte(nil), hdr...), data...),
			"config.json":       []byte(`{"hidden_size": 64}`),
		})
	}
	return out
}

// writeReplace writes data to NAME.tmp, syncs it and renames it onto NAME, as slime's sender
// writes each file of its delta checkpoint.
func writeReplace(path string, data []byte) error {
	f, err := os.OpenFile(path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// TestFollowDeltaVersions (issue 31 item 5, follow): a follower of a read-write mount whose
// version 1 was written whole and versions 2-5 came in as deltas (patches written into
// patches/ and slime delta checkpoints into deltas/, both made by a store that ingested the
// same versions whole) keeps its directory byte for byte at each version, by one catch-up
// patch per version: only version 1 is copied whole.
func TestFollowDeltaVersions(t *testing.T) {
	work, _, rw, _, rwMount := followMounts(t)
	versions := deltaInVersions(t, 5)

	// The deltas come from a store that ingested every version whole.
	fullDir := filepath.Join(work, "full")
	if err := store.Init(fullDir); err != nil {
		t.Fatal(err)
	}
	full, err := store.Open(fullDir, store.Options{CacheDir: filepath.Join(work, "full-cache")})
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	for i, files := range versions {
		w, err := full.NewVersion(uint64(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"config.json", "model.safetensors"} {
			if err := w.AddFile(name, bytes.NewReader(files[name]), int64(len(files[name])), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Seal(); err != nil {
			t.Fatal(err)
		}
	}

	want := make([]map[string]string, len(versions))
	for i, files := range versions {
		src := filepath.Join(work, fmt.Sprintf("want%d", i+1))
		for name, b := range files {
			if err := os.MkdirAll(src, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want[i] = treeHashes(t, src)
	}
	sealVersion(t, rw, 1, filepath.Join(work, "want1"))
	dir := filepath.Join(work, "follow")
	f := startFollower(t, rw, dir)
	waitDirVersion(t, dir, 1, f)
	sameHashes(t, "followed directory at version 1", followedHashes(t, dir), want[0])

	for v := 2; v <= 5; v++ {
		if v%2 == 0 {
			p, err := os.Create(filepath.Join(work, patchName(v)))
			if err != nil {
				t.Fatal(err)
			}
			_, err = full.WritePatch(uint64(v), p)
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p.Name())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(rw, "patches", patchName(v)), b, 0o644); err != nil {
				t.Fatalf("patch to version %d into the mount: %v\n%s", v, err, rwMount.out.String())
			}
		} else {
			out := filepath.Join(work, fmt.Sprintf("delta%d", v))
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			names, err := full.WriteSlimeDelta(uint64(v), out)
			if err != nil {
				t.Fatal(err)
			}
			vdir := filepath.Join(rw, "deltas", fmt.Sprintf("weight_v%06d", v))
			if err := os.MkdirAll(vdir, 0o777); err != nil {
				t.Fatal(err)
			}
			for _, name := range append(names[1:], names[0]) { // the shards, then the index
				b, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatal(err)
				}
				if err := writeReplace(filepath.Join(vdir, name), b); err != nil {
					t.Fatalf("slime delta to version %d into the mount, %s: %v\n%s", v, name, err, rwMount.out.String())
				}
			}
		}
		waitDirVersion(t, dir, uint64(v), f)
		what := fmt.Sprintf("followed directory at version %d (came in as a %s)", v, []string{"patch", "slime delta"}[v%2])
		sameHashes(t, what, followedHashes(t, dir), want[v-1])
		sameHashes(t, what+", against the mount", followedHashes(t, dir), treeHashes(t, versionDir(rw, v)))
	}
	out := f.out.String()
	if n := strings.Count(out, "copied whole"); n != 1 {
		t.Errorf("%d full copies, want 1 (the first version):\n%s", n, out)
	}
	for v := 2; v <= 5; v++ {
		if !strings.Contains(out, fmt.Sprintf("version %d -> %d", v-1, v)) {
			t.Errorf("no patch from version %d to %d:\n%s", v-1, v, out)
		}
	}
}
