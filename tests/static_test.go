package tests

import (
	"bytes"
	"debug/elf"
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
	checkStatic(t, bin)
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

// checkStatic fails unless the ELF file bin is statically linked: no program interpreter
// (PT_INTERP) and no shared library it needs (DT_NEEDED). Read with debug/elf rather than
// file(1), which a fresh Debian machine lacks (the check was skipped there).
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("read the CGO_ENABLED=0 binary as ELF: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("the CGO_ENABLED=0 binary is not static: it has a program interpreter")
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("the CGO_ENABLED=0 binary's dynamic section: %v", err)
	}
	if len(libs) > 0 {
		t.Errorf("the CGO_ENABLED=0 binary is not static: it needs %v", libs)
	}
}
