package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestRunWritesVersions(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"--params", "tiny", "--versions", "3", out, "--start", "2", "--done", "--lr=1e-6", "--shards", "2"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	line := regexp.MustCompile(`^weight_v00000[234] \d+ bytes \d+\.\d{3} s$`)
	if len(lines) != 3 {
		t.Fatalf("output %q", stdout.String())
	}
	for i, l := range lines {
		if !line.MatchString(l) || !strings.HasPrefix(l, "weight_v00000"+string(rune('2'+i))) {
			t.Errorf("line %q", l)
		}
	}
	for _, v := range []string{"weight_v000002", "weight_v000003", "weight_v000004"} {
		for _, f := range []string{"DONE", "config.json", "model.safetensors.index.json", "model-00002-of-00002.safetensors"} {
			if _, err := os.Stat(filepath.Join(out, v, f)); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(out, "weight_v000001")); !os.IsNotExist(err) {
		t.Errorf("weight_v000001 exists: %v", err)
	}
}

// TestVersionOnlyMatchesSeries: --version-only K writes the same files as version K of a
// series, straight into --out.
func TestVersionOnlyMatchesSeries(t *testing.T) {
	series, single := t.TempDir(), t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--params", "10K", "--versions", "3", "--out", series}, &stdout, &stderr); code != 0 {
		t.Fatalf("series: exit %d: %s", code, stderr.String())
	}
	if code := run([]string{"--params", "10K", "--version-only", "3", "--out", single, "--done"}, &stdout, &stderr); code != 0 {
		t.Fatalf("version-only: exit %d: %s", code, stderr.String())
	}
	for _, f := range []string{"model.safetensors", "config.json", "generation_config.json"} {
		a, err := os.ReadFile(filepath.Join(series, "weight_v000003", f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(single, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs", f)
		}
	}
	if _, err := os.Stat(filepath.Join(single, "DONE")); err != nil {
		t.Error(err)
	}
}

func TestRunUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no output", []string{"--params", "tiny"}, 2, "no output directory"},
		{"two outputs", []string{"a", "b"}, 2, "one output directory"},
		{"out twice", []string{"--out", "a", "b"}, 2, "given twice"},
		{"unknown flag", []string{"--nope", dir}, 2, "unknown flag"},
		{"missing value", []string{dir, "--lr"}, 2, "needs a value"},
		{"bad params", []string{"--params", "lots", dir}, 1, "bad parameter count"},
		{"bad lr", []string{"--params", "tiny", "--lr", "0", dir}, 1, "learning rate"},
		{"bad shards", []string{"--shards", "0", dir}, 2, "--shards"},
		{"version-only with versions", []string{"--version-only", "2", "--versions", "3", dir}, 2, "--version-only"},
		{"bad start", []string{"--params", "tiny", "--start", "0", dir}, 1, "bad version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"usage: weightfs-gen", "-version-only", "-stream", "-done"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
