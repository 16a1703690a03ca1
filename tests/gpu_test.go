package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/gen"
)

// TestCommitWithGPUDiffStoresSameObjects commits the same versions with --diff cpu and with
// --diff gpu (the OpenCL kernel; PoCL on machines without a GPU) and compares the stores: the
// same object files with the same bytes, and the same version contents.
func TestCommitWithGPUDiffStoresSameObjects(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it reads loose object files (store format 2's layout)
	m, err := gen.New(gen.ConfigForParams(2_000_000, 3e-6, 3))
	if err != nil {
		t.Fatal(err)
	}
	var srcs []string
	for v := 1; v <= 4; v++ {
		if v > 1 {
			m.Step()
		}
		src := filepath.Join(t.TempDir(), fmt.Sprint(v))
		if err := m.WriteCheckpoint(src); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, src)
	}
	stores := map[string]string{}
	for _, mode := range []string{"cpu", "gpu"} {
		dir := filepath.Join(t.TempDir(), mode)
		mustCLI(t, "init", dir)
		for i, src := range srcs {
			r := runCLI(t, "commit", "--diff", mode, dir, src, "--version", fmt.Sprint(i+1))
			if r.code != 0 {
				if mode == "gpu" && os.Getenv("CI") == "" && strings.Contains(r.stderr, "OpenCL") {
					t.Skipf("no OpenCL device here (make deps installs PoCL): %s", r.stderr)
				}
				t.Fatalf("commit --diff %s: exit %d: %s", mode, r.code, r.stderr)
			}
			if mode == "gpu" && i == 0 && !strings.Contains(strings.ToLower(r.stderr), "opencl") {
				t.Errorf("commit --diff gpu did not say it runs the OpenCL backend: %q", r.stderr)
			}
		}
		stores[mode] = dir
	}
	cpuObjs := objectFiles(t, stores["cpu"])
	gpuObjs := objectFiles(t, stores["gpu"])
	names := func(paths []string, root string) []string {
		var out []string
		for _, p := range paths {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		sort.Strings(out)
		return out
	}
	cn, gn := names(cpuObjs, stores["cpu"]), names(gpuObjs, stores["gpu"])
	if strings.Join(cn, ",") != strings.Join(gn, ",") {
		t.Fatalf("object sets differ:\ncpu: %v\ngpu: %v", cn, gn)
	}
	for _, rel := range cn {
		a, _ := os.ReadFile(filepath.Join(stores["cpu"], rel))
		b, _ := os.ReadFile(filepath.Join(stores["gpu"], rel))
		if !bytes.Equal(a, b) {
			t.Errorf("object %s differs between --diff cpu and --diff gpu", rel)
		}
	}
	for v := 1; v <= 4; v++ {
		a := treeHashes(t, exportTo(t, stores["cpu"], v))
		b := treeHashes(t, exportTo(t, stores["gpu"], v))
		sameHashes(t, fmt.Sprintf("v%d gpu vs cpu", v), b, a)
	}
}

func exportTo(t *testing.T, store string, v int) string {
	out := filepath.Join(t.TempDir(), "export")
	mustCLI(t, "export", store, fmt.Sprint(v), out)
	return out
}

// TestDiffSelectionWithoutGPULibraries runs the CLI as on a machine with neither NVML nor
// OpenCL: auto selects the CPU and says why; --diff gpu fails with a clear error.
func TestDiffSelectionWithoutGPULibraries(t *testing.T) {
	t.Setenv("WEIGHTFS_NVML_LIBRARY", "libnvidia-ml-absent.so.1")
	t.Setenv("WEIGHTFS_OPENCL_LIBRARY", "libOpenCL-absent.so.1")
	r := mustCLI(t, "gpus")
	if !strings.Contains(r.stdout, "--diff auto runs cpu") || !strings.Contains(r.stdout, "not found") {
		t.Errorf("gpus report does not say auto runs the CPU and why:\n%s", r.stdout)
	}
	store := filepath.Join(t.TempDir(), "store")
	mustCLI(t, "init", store)
	src := writeTree(t, map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"BF16","shape":[8],"data_offsets":[0,16]}}`, seq(16))})
	r = mustCLI(t, "commit", "--diff", "auto", store, src)
	if !strings.Contains(r.stderr, "diff backend: cpu") {
		t.Errorf("commit --diff auto did not log the CPU choice and its reason: %q", r.stderr)
	}
	r = runCLI(t, "commit", "--diff", "gpu", store, src)
	if r.code != 1 || !strings.Contains(r.stderr, "--diff gpu") || !strings.Contains(r.stderr, "OpenCL") {
		t.Errorf("commit --diff gpu without libraries: exit %d, %q; want a clear failure", r.code, r.stderr)
	}
}
