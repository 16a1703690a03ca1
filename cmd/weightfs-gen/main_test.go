package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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
		{"top-k without experts", []string{"--top-k", "2", dir}, 2, "need --experts"},
		{"shared expert without experts", []string{"--shared-expert-intermediate", "64", dir}, 2, "need --experts"},
		{"deepseek without experts", []string{"--deepseek", dir}, 2, "need --experts"},
		{"negative experts", []string{"--experts", "-1", dir}, 2, "at least 0"},
		{"top-k above experts", []string{"--params", "tiny", "--experts", "4", "--top-k", "5", dir}, 1, "top-k 5"},
		{"layers of a dense count", []string{"--params", "10K", "--layers", "3", dir}, 1, "needs --experts"},
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
	for _, want := range []string{"usage: weightfs-gen", "-version-only", "-stream", "-done", "-experts", "-top-k", "-expert-intermediate", "-shared-expert-intermediate", "-layers", "-deepseek"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// TestRunMoE: --experts writes a Qwen-named mixture of experts, sharded with an index that
// maps every tensor once; --layers sets the depth of a preset; --top-k defaults to 8 or the
// experts, whichever is fewer; the same flags give the same bytes.
func TestRunMoE(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		tensors int
		summary string
	}{
		{"preset", []string{"--params", "tiny", "--layers", "3", "--experts", "16", "--shards", "4"}, 3*(9+48) + 3, "16 experts of 8, top-8"},
		{"few experts", []string{"--params", "tiny", "--experts", "4", "--shards", "2"}, 9 + 12 + 3, "4 experts of 16, top-4"},
		{"shared expert", []string{"--params", "tiny", "--experts", "4", "--top-k", "2", "--shared-expert-intermediate", "32", "--shards", "2"}, 14 + 12 + 3, "shared expert of 32"},
		{"count", []string{"--params", "2M", "--layers", "4", "--experts", "8", "--top-k", "2", "--shards", "3"}, 4*(9+24) + 3, "8 experts of"},
		// 3 dense layers of 20 tensors, then attention 12, router 2, experts 24, shared 6, norms 2.
		{"deepseek", []string{"--params", "tiny", "--layers", "4", "--experts", "4", "--top-k", "2", "--deepseek", "--shared-expert-intermediate", "8", "--shards", "2"},
			3*20 + 46 + 3, "4 experts of 24, top-2, DeepSeek-V3 fp8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var digests []string
			for range 2 {
				out := t.TempDir()
				var stdout, stderr bytes.Buffer
				if code := run(append(tc.args, "--version-only", "2", out), &stdout, &stderr); code != 0 {
					t.Fatalf("exit %d: %s", code, stderr.String())
				}
				if want := fmt.Sprintf("in %d tensors", tc.tensors); !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), tc.summary) {
					t.Errorf("stderr %q lacks %q or %q", stderr.String(), want, tc.summary)
				}
				b, err := os.ReadFile(filepath.Join(out, "model.safetensors.index.json"))
				if err != nil {
					t.Fatal(err)
				}
				var index struct {
					WeightMap map[string]string `json:"weight_map"`
				}
				if err := json.Unmarshal(b, &index); err != nil {
					t.Fatal(err)
				}
				expert := "model.layers.0.mlp.experts.3.down_proj.weight"
				if tc.name == "deepseek" {
					expert = "model.layers.3.mlp.experts.3.down_proj.weight_scale_inv"
				}
				if len(index.WeightMap) != tc.tensors || index.WeightMap[expert] == "" {
					t.Errorf("index maps %d tensors, want %d with %s", len(index.WeightMap), tc.tensors, expert)
				}
				entries, err := os.ReadDir(out)
				if err != nil {
					t.Fatal(err)
				}
				var all bytes.Buffer
				for _, e := range entries {
					f, err := os.ReadFile(filepath.Join(out, e.Name()))
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&all, "%s %d\n", e.Name(), len(f))
					all.Write(f)
				}
				digests = append(digests, fmt.Sprintf("%x", all.Bytes()))
			}
			if digests[0] != digests[1] {
				t.Error("the same flags gave different bytes")
			}
		})
	}
}
