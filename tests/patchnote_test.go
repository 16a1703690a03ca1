package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogSaysWholeFiles: `weightfs log` says which versions' patches carry files whole, and
// why: here a config.json that changed (not safetensors).
func TestLogSaysWholeFiles(t *testing.T) {
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	mustCLI(t, "init", storeDir)
	for v, cfg := range []string{`{"a": 1}`, `{"a": 1}`, `{"a": 22}`} {
		dir := filepath.Join(work, "v")
		os.RemoveAll(dir)
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644)
		mustCLI(t, "commit", "--version", string(rune('1'+v)), storeDir, dir)
	}
	out := mustCLI(t, "log", storeDir).stdout
	if !strings.Contains(out, "weight_v000003  patch carries 1 file(s) whole, 9 bytes: config.json (not safetensors)") ||
		strings.Contains(out, "weight_v000002  patch") {
		t.Errorf("weightfs log:\n%s", out)
	}
}
