package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreImportsNoBackendLibraries: the store core and the mount build without the S3 client
// and without Prometheus (docs/design.md, "Packages"), while store/s3 and metrics do import
// them (so that a change in the listing, not a lost import, cannot make this pass).
func TestCoreImportsNoBackendLibraries(t *testing.T) {
	deps := func(pkgs ...string) string {
		t.Helper()
		cmd := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...)
		cmd.Dir = repoRoot()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v", pkgs, err)
		}
		return string(out)
	}
	const minio, prom = "github.com/minio/minio-go", "github.com/prometheus/client_golang"
	core := deps("./fs", "./store")
	for _, lib := range []string{minio, prom} {
		if strings.Contains(core, lib) {
			t.Errorf("./fs or ./store depends on %s", lib)
		}
	}
	if !strings.Contains(deps("./store/s3"), minio) {
		t.Errorf("./store/s3 does not list %s: the check above proves nothing", minio)
	}
	if !strings.Contains(deps("./metrics"), prom) {
		t.Errorf("./metrics does not list %s: the check above proves nothing", prom)
	}
}
