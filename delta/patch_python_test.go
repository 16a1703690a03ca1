package delta

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pythonWithNumpy returns /usr/bin/python3 when it can import numpy, or skips the test.
func pythonWithNumpy(t *testing.T) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import numpy").Run(); err != nil {
		t.Skipf("skipping: %s with numpy is not available (%v); install python3-numpy", python, err)
	}
	return python
}

// TestPythonApplyPatch runs examples/apply_patch.py, the numpy reference reader, on a patch
// written by BuildPatch and requires the exact result bytes, checking by xxh3-128 (when the
// xxhash module is there) and by SHA-256.
func TestPythonApplyPatch(t *testing.T) {
	python := pythonWithNumpy(t)
	script, err := filepath.Abs("../examples/apply_patch.py")
	if err != nil {
		t.Fatal(err)
	}
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 43, 42, base, result, order)
	hashes := []struct {
		flags []string
		kind  string
	}{{[]string{"--sha256"}, "sha256"}}
	if exec.Command(python, "-c", "import xxhash").Run() == nil {
		hashes = append(hashes, struct {
			flags []string
			kind  string
		}{nil, "xxh3-128"})
	} else {
		t.Log("the xxhash module is missing (python3-xxhash): checking SHA-256 only")
	}
	for _, h := range hashes {
		t.Run(h.kind, func(t *testing.T) {
			dir := t.TempDir()
			patchPath := filepath.Join(dir, "weight_v000043.safetensors")
			target := filepath.Join(dir, "model.safetensors")
			if err := os.WriteFile(patchPath, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			run := func() (string, error) {
				out, err := exec.Command(python, append([]string{script, patchPath, target}, h.flags...)...).CombinedOutput()
				return string(out), err
			}

			// A file that is not the base is refused and left as it was.
			model, hdr := patchTestModel(t, 1)
			other := mutateElements(t, model, hdr, "model.mask", 0)
			os.WriteFile(target, other, 0o644)
			if out, err := run(); err == nil || !strings.Contains(out, h.kind+" ") || !strings.Contains(out, "is not the patch's base") {
				t.Errorf("wrong base accepted: %v\n%s", err, out)
			}
			if got, _ := os.ReadFile(target); !bytes.Equal(got, other) {
				t.Error("the script changed a file that is not the base")
			}

			os.WriteFile(target, base["model.safetensors"], 0o644)
			if out, err := run(); err != nil || !strings.Contains(out, "applied 9 changed elements in 4 tensors; "+h.kind) {
				t.Fatalf("apply_patch.py: %v\n%s", err, out)
			}
			if got, _ := os.ReadFile(target); !bytes.Equal(got, result["model.safetensors"]) {
				t.Fatal("apply_patch.py produced other bytes than the result")
			}
			if out, err := run(); err != nil || !strings.Contains(out, "already the result ("+h.kind) {
				t.Errorf("second run: %v\n%s", err, out)
			}
		})
	}
}
