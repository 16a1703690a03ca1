package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/gpu"
)

// TestStaticBinary builds weightfs with CGO_ENABLED=0 (what `make static` does) and checks
// that the binary is static, that `weightfs gpus` says it has no GPU support, that --diff auto
// commits with the CPU diff and says why, and that --diff gpu fails with the same sentence.
func TestStaticBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "weightfs-static")
	build := exec.Command("go", "build", "-o", bin, "./cmd/weightfs")
	build.Dir = repoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./cmd/weightfs: %v\n%s", err, out)
	}
	if elf, err := exec.Command("file", bin).Output(); err == nil && !bytes.Contains(elf, []byte("statically linked")) {
		t.Errorf("the CGO_ENABLED=0 binary is not static: %s", elf)
	}
	msg := gpu.ErrNoGPUSupport.Error()
	run := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		cmd := weightfsCommand(bin, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != wantCode {
			t.Fatalf("weightfs %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}

	out, _ := run(0, "gpus")
	for _, want := range []string{"NVML (libnvidia-ml.so.1): " + msg, "--diff auto runs cpu: " + msg, "--diff gpu fails: " + msg} {
		if !strings.Contains(out, want) {
			t.Errorf("weightfs gpus lacks %q:\n%s", want, out)
		}
	}

	out, _ = run(0, "gpus", "--json")
	if !strings.Contains(out, `"gpu_support": false`) || !strings.Contains(out, `"reason": "`+msg) {
		t.Errorf("weightfs gpus --json does not say gpu_support false and why:\n%s", out)
	}

	dir := t.TempDir()
	storeDir := filepath.Join(dir, "store")
	run(0, "init", storeDir)
	m, err := gen.New(gen.ConfigForParams(20_000, 3e-6, 7))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := m.WriteCheckpoint(src); err != nil {
		t.Fatal(err)
	}
	_, errOut := run(0, "commit", storeDir, src)
	if !strings.Contains(errOut, `msg="diff backend: cpu" reason="`+msg) {
		t.Errorf("commit --diff auto does not log the CPU backend and why:\n%s", errOut)
	}
	_, errOut = run(1, "commit", "--diff", "gpu", storeDir, src)
	if !strings.Contains(errOut, msg) {
		t.Errorf("commit --diff gpu does not fail with %q:\n%s", msg, errOut)
	}
	run(0, "verify", storeDir)
}
