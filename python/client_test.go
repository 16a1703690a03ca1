// Package python_test runs the Python client's tests (python/tests, unittest) under go test, so
// that `make test` and `go test ./...` count them. They need Debian's python3 with numpy
// (python3-numpy; `make deps` installs it, with python3-torch and python3-xxhash); without
// numpy the test skips, saying what to install.
package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const python = "/usr/bin/python3"

// TestPythonClient installs the client with pip (no network: --no-build-isolation, Debian's
// setuptools) into a temporary directory, builds weightfs and weightfs-gen, and runs
// `python3 -m unittest discover python/tests` against the installed package: patch round
// trips on generated RL checkpoints (numpy and torch), refusals of damaged patches and of
// mismatched tensors, per-tensor digests, the vLLM conversion, and the trainer-side writer
// (test_writer.py: 10 versions through patches/ of a real read-write mount against a full save
// into another, which needs /dev/fuse; without it those tests skip).
func TestPythonClient(t *testing.T) {
	if err := exec.Command(python, "-c", "import numpy").Run(); err != nil {
		t.Skipf("skipping: %s with numpy is not available (%v); install python3-numpy (make deps)", python, err)
	}
	for _, mod := range []string{"torch", "xxhash"} {
		if exec.Command(python, "-c", "import "+mod).Run() != nil {
			t.Logf("the %s module is missing (python3-%s): its tests skip", mod, mod)
		}
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	for _, cmd := range []string{"weightfs", "weightfs-gen"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, cmd), "../cmd/"+cmd).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", cmd, err, out)
		}
	}
	// The package as pip installs it, not the source tree: the tests import what users get.
	site := filepath.Join(tmp, "site")
	env := append(os.Environ(), "WEIGHTFS_BIN="+filepath.Join(bin, "weightfs"), "WEIGHTFS_GEN_BIN="+filepath.Join(bin, "weightfs-gen"),
		"PYTHONDONTWRITEBYTECODE=1")
	src := filepath.Join(tmp, "src") // pip builds in the source directory: leave the worktree clean
	if out, err := exec.Command("cp", "-r", ".", src).CombinedOutput(); err != nil {
		t.Fatalf("copy python/: %v\n%s", err, out)
	}
	pip := exec.Command(python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", "--no-index", "--target", site, src)
	if out, err := pip.CombinedOutput(); err != nil {
		if exec.Command(python, "-m", "pip", "--version").Run() == nil {
			t.Fatalf("pip install of python/: %v\n%s", err, out)
		}
		t.Logf("pip is missing (python3-pip): testing the source tree instead")
		site = "."
	}
	tests, err := filepath.Abs("tests")
	if err != nil {
		t.Fatal(err)
	}
	if site == "." {
		site, _ = filepath.Abs(".")
	}
	env = append(env, "PYTHONPATH="+site)
	// Run from tmp: python puts the working directory first on sys.path, and python/ holds
	// the source tree.
	cmd := exec.Command(python, "-m", "unittest", "discover", "-v", "-s", tests, "-t", tests)
	cmd.Env, cmd.Dir = env, tmp
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest discover python/tests:\n%s", out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	if !strings.Contains(string(out), "\nOK") {
		t.Fatalf("no OK from unittest")
	}
	check := exec.Command(python, "-c", "import weightfs, sys; print(weightfs.__file__); sys.exit(0 if weightfs.__file__.startswith(sys.argv[1]) else 1)", site)
	check.Env, check.Dir = env, tmp
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("the tests did not import the package from %s: %v %s", site, err, out)
	}
}
