package tests

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawSafetensors builds a safetensors file from a JSON header and data, padding the header
// with spaces to a multiple of 8 as the format's writers do.
func rawSafetensors(header string, data []byte) []byte {
	for len(header)%8 != 0 {
		header += " "
	}
	out := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

func writeTree(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

// TestBadInput commits each kind of bad input on top of a good version: each gets a clear
// message, what can be stored is stored and round-trips, and nothing already sealed is lost.
func TestBadInput(t *testing.T) {
	good := rawSafetensors(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},"b":{"dtype":"BF16","shape":[8],"data_offsets":[64,80]}}`, seq(80))
	valid := rawSafetensors(`{"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}}`, seq(64))
	headerPastEnd := make([]byte, 100)
	binary.LittleEndian.PutUint64(headerPastEnd, 1_000_000)

	cases := []struct {
		name    string
		files   map[string][]byte
		refused bool   // the commit must fail
		message string // what stderr must mention
	}{
		{"truncated safetensors", map[string][]byte{"model.safetensors": good[:len(good)-30]}, false, "model.safetensors"},
		{"header length past the end", map[string][]byte{"model.safetensors": headerPastEnd}, false, "model.safetensors"},
		{"tensor offsets past the end", map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,640]}}`, seq(64))}, false, "model.safetensors"},
		{"overlapping tensors", map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]},"b":{"dtype":"F32","shape":[4,4],"data_offsets":[32,96]}}`, seq(96))}, false, "model.safetensors"},
		{"invalid header JSON", map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"F32",`, seq(64))}, false, "model.safetensors"},
		{"dtype and shape changed", map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"BF16","shape":[32],"data_offsets":[0,64]},"b":{"dtype":"BF16","shape":[2,4],"data_offsets":[64,80]}}`, seq(80))}, false, ""},
		{"subdirectories and other files", map[string][]byte{
			"model.safetensors": valid, "config.json": []byte(`{"model_type":"llama"}`),
			"tokenizer.json": []byte(`{"version":"1.0"}`), "sub/dir/notes.txt": []byte("hello\n"),
		}, false, ""},
		{"empty directory", map[string][]byte{}, true, "empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			storeDir := filepath.Join(t.TempDir(), "store")
			mustCLI(t, "init", storeDir)
			base := writeTree(t, map[string][]byte{"model.safetensors": good, "config.json": []byte("{}")})
			mustCLI(t, "commit", storeDir, base)
			bad := writeTree(t, tc.files)
			r := runCLI(t, "commit", "--log-level", "debug", storeDir, bad) // a file stored whole is a debug line
			if tc.refused != (r.code != 0) {
				t.Fatalf("commit exit %d (refused=%v wanted)\nstdout: %s\nstderr: %s", r.code, tc.refused, r.stdout, r.stderr)
			}
			if tc.message != "" && !strings.Contains(strings.ToLower(r.stderr+r.stdout), tc.message) {
				t.Errorf("message does not mention %q:\n%s%s", tc.message, r.stdout, r.stderr)
			}
			if !tc.refused {
				out := filepath.Join(t.TempDir(), "out")
				mustCLI(t, "export", storeDir, "2", out)
				sameHashes(t, "bad input round trip", treeHashes(t, out), treeHashes(t, bad))
			}
			out := filepath.Join(t.TempDir(), "v1")
			mustCLI(t, "export", storeDir, "1", out)
			sameHashes(t, "v1 after bad input", treeHashes(t, out), treeHashes(t, base))
			mustCLI(t, "verify", storeDir)
		})
	}
}

// TestVersionNotAboveLatest refuses a version number that does not exceed the latest.
func TestVersionNotAboveLatest(t *testing.T) {
	storeDir := filepath.Join(t.TempDir(), "store")
	mustCLI(t, "init", storeDir)
	src := writeTree(t, map[string][]byte{"model.safetensors": rawSafetensors(`{"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}`, seq(16))})
	mustCLI(t, "commit", storeDir, src, "--version", "5")
	for _, v := range []string{"5", "3"} {
		r := runCLI(t, "commit", storeDir, src, "--version", v)
		if r.code == 0 || !strings.Contains(r.stderr, "5") {
			t.Errorf("commit --version %s after v5: exit %d, stderr %q; want a refusal naming the latest (5)", v, r.code, r.stderr)
		}
	}
	r := mustCLI(t, "log", storeDir)
	if strings.Count(r.stdout, "weight_v") != 1 {
		t.Errorf("log lists other than one version:\n%s", r.stdout)
	}
	mustCLI(t, "commit", storeDir, src, "--version", "9")
	r = runCLI(t, "commit", storeDir, filepath.Join(t.TempDir(), "missing"))
	if r.code == 0 {
		t.Errorf("commit of a missing directory succeeded")
	}
}

// TestCLIUsage checks --help on every command and the usage errors.
func TestCLIUsage(t *testing.T) {
	for _, c := range []string{"init", "mount", "commit", "log", "diff", "export", "patch", "apply", "verify", "gc", "gpus"} {
		r := runCLI(t, c, "--help")
		if r.code != 0 || !strings.Contains(r.stdout, "Usage: weightfs "+c) {
			t.Errorf("%s --help: exit %d, %q", c, r.code, r.stdout)
		}
	}
	if r := runCLI(t, "frobnicate"); r.code != 2 || !strings.Contains(r.stderr, "unknown command") {
		t.Errorf("unknown command: exit %d, %q", r.code, r.stderr)
	}
	if r := runCLI(t, "export", "onlyone"); r.code != 2 {
		t.Errorf("missing arguments: exit %d, want 2", r.code)
	}
	if r := runCLI(t, "log", fmt.Sprint(t.TempDir())); r.code != 1 || r.stderr == "" {
		t.Errorf("log of a non-store: exit %d, %q", r.code, r.stderr)
	}
}
