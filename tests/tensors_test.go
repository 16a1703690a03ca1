package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/gen"
)

// TestManyTensors is issue 29 item 5 end to end with the real programs, at a size that runs in
// well under a minute: a DeepSeek-V3-shaped checkpoint (gen's `--experts 256 --deepseek`:
// `model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight` in fp8 with their float32
// `weight_scale_inv`, 8 shards) of ~3,200 tiny tensors, versions 1 and 2 (one RL step apart)
// committed with `weightfs commit`; a read-only mount lists version 2 (`ls -l`: every file
// with its source's size) and serves every file of both versions with its source's SHA-256;
// `weightfs log` lists both with their files and bytes; `weightfs verify` exits 0; `weightfs
// gc --keep-last 1` drops version 1, after which log lists version 2 alone, verify exits 0
// and a new read-only mount still serves version 2's bytes. bench's figure 11 (tensors)
// measures the same steps at 10,000 and 100,000 tensors.
func TestManyTensors(t *testing.T) {
	// 3,167 tensors keeps make test inside its time (10: 10,927, 78 s on a loaded machine;
	// 16: 20,239); figure 11 of make bench runs the same steps at 100,000.
	layers := 5
	if testing.Short() {
		layers = 3
	}
	cfg, err := gen.Preset("tiny", 3e-6, 29)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Layers = layers
	cfg = gen.WithMoE(cfg, gen.MoE{Experts: 256, TopK: 8, DeepSeek: true})
	cfg.Shards = 8
	tensors, err := cfg.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, ti := range tensors {
		names[ti.Name] = true
	}
	last := strconv.Itoa(layers - 1)
	for _, n := range []string{
		"model.layers." + last + ".mlp.experts.255.down_proj.weight",
		"model.layers." + last + ".mlp.experts.255.down_proj.weight_scale_inv",
		"model.layers." + last + ".mlp.experts.0.gate_proj.weight",
		"model.layers." + last + ".mlp.gate.weight",
	} {
		if !names[n] {
			t.Fatalf("the generated model has no tensor %s", n)
		}
	}
	t.Logf("%d tensors in %d layers", len(tensors), layers)

	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	mustCLI(t, "init", storeDir)
	want := map[int]map[string]string{}
	sizes := map[string]int64{}
	var logical int64
	for v := 1; v <= 2; v++ {
		if err := gen.StreamCheckpoint(cfg, v-1, srcDir(work, v)); err != nil {
			t.Fatal(err)
		}
		want[v] = treeHashes(t, srcDir(work, v))
		mustCLI(t, "commit", storeDir, srcDir(work, v))
	}
	if want[1]["model-00001-of-00008.safetensors"] == want[2]["model-00001-of-00008.safetensors"] {
		t.Fatal("version 2's first shard is version 1's: the step changed nothing")
	}
	for rel := range want[2] {
		fi, err := os.Stat(filepath.Join(srcDir(work, 2), rel))
		if err != nil {
			t.Fatal(err)
		}
		sizes[rel] = fi.Size()
		logical += fi.Size()
	}

	// The index the mount serves names every tensor.
	mnt := filepath.Join(work, "mnt")
	mnt2 := filepath.Join(work, "mnt2")
	for _, m := range []string{mnt, mnt2} {
		if err := os.Mkdir(m, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d := startMount(t, storeDir, mnt, "--read-only", "--cache-dir", filepath.Join(work, "reader-cache"))
	checkListing(t, run(t, "ls", "-l", versionDir(mnt, 2)), sizes)
	for v := 2; v >= 1; v-- {
		sameHashes(t, "version "+strconv.Itoa(v)+" on the read-only mount", sha256sumTree(t, versionDir(mnt, v)), want[v])
	}
	raw, err := os.ReadFile(filepath.Join(versionDir(mnt, 2), "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatalf("the index on the mount: %v", err)
	}
	if len(index.WeightMap) != len(tensors) {
		t.Errorf("the index on the mount names %d tensors, want %d", len(index.WeightMap), len(tensors))
	}
	d.stop()

	lg := logVersions(t, storeDir)
	if len(lg) != 2 || lg[0].Version != 1 || lg[1].Version != 2 {
		t.Fatalf("log lists %+v, want versions 1 and 2", lg)
	}
	for _, v := range lg {
		if v.Files != len(want[2]) || v.LogicalBytes != logical {
			t.Errorf("log: version %d has %d files and %d logical bytes, want %d and %d", v.Version, v.Files, v.LogicalBytes, len(want[2]), logical)
		}
	}
	if r := runCLI(t, "verify", storeDir); r.code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	mustCLI(t, "gc", "--keep-last", "1", storeDir)
	lg = logVersions(t, storeDir)
	if len(lg) != 1 || lg[0].Version != 2 {
		t.Fatalf("after gc --keep-last 1, log lists %+v, want version 2 alone", lg)
	}
	if r := runCLI(t, "verify", storeDir); r.code != 0 {
		t.Fatalf("verify after gc: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	d = startMount(t, storeDir, mnt2, "--read-only", "--cache-dir", filepath.Join(work, "reader-cache2"))
	if _, err := os.Stat(versionDir(mnt2, 1)); !os.IsNotExist(err) {
		t.Errorf("after gc, version 1 on a new mount: %v, want it gone", err)
	}
	sameHashes(t, "version 2 on a read-only mount after gc", sha256sumTree(t, versionDir(mnt2, 2)), want[2])
	d.stop()
}

// checkListing checks that `ls -l` output lists every file of sizes with its size.
func checkListing(t *testing.T, out string, sizes map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 {
			continue // "total N" and the empty last line
		}
		n, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil {
			t.Fatalf("ls -l: no size in %q", line)
		}
		got[f[len(f)-1]] = n
	}
	for name, size := range sizes {
		if got[name] != size {
			t.Errorf("ls -l lists %s with %d bytes, want %d", name, got[name], size)
		}
	}
	for name := range got {
		if _, ok := sizes[name]; !ok && name != "DONE" {
			t.Errorf("ls -l lists %s, which is not in the source", name)
		}
	}
}

type logVersion struct {
	Version      int   `json:"version"`
	Files        int   `json:"files"`
	LogicalBytes int64 `json:"logical_bytes"`
}

// logVersions is `weightfs log --json STORE`'s versions.
func logVersions(t *testing.T, storeDir string) []logVersion {
	t.Helper()
	var out struct {
		Versions []logVersion `json:"versions"`
	}
	r := mustCLI(t, "log", "--json", storeDir)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("log --json: %v\n%s", err, r.stdout)
	}
	return out.Versions
}
