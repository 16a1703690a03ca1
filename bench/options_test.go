package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseOnly(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", figureNames, false},
		{"all", figureNames, false},
		{"ingest,reads", []string{"reads", "ingest"}, false},
		{" 2, 3 ,seal", []string{"ingest"}, false},
		{"8,1", []string{"kernel", "delta"}, false},
		{"KERNEL", []string{"kernel"}, false},
		{"ingest,bogus", nil, true},
		{",", nil, true},
		{"9", []string{"sync"}, false},
		{"9,e2e,1", []string{"delta", "sync"}, false},
		{"10", []string{"group"}, false},
		{"11", []string{"tensors"}, false},
		{"12", []string{"hash"}, false},
		{"13", []string{"moe"}, false},
		{"14", []string{"patchin"}, false},
		{"15", nil, true},
	}
	for _, tc := range tests {
		got, err := parseOnly(tc.in)
		if (err != nil) != tc.wantErr || !slices.Equal(got, tc.want) {
			t.Errorf("parseOnly(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParseOnly(f *testing.F) {
	f.Add("ingest,reads")
	f.Add("1,2,x")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseOnly(s)
		if err != nil {
			return
		}
		if len(got) == 0 {
			t.Fatalf("parseOnly(%q) selected nothing without an error", s)
		}
		for _, name := range got {
			if !slices.Contains(figureNames, name) {
				t.Fatalf("parseOnly(%q) gave unknown figure %q", s, name)
			}
		}
	})
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-quick", "-only", "kernel"}, ""},
		{[]string{"-write-size", "4096"}, "at least 1 MiB"},
		{[]string{"-read-reps", "0"}, "at least 1"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-only", "nope"}, "unknown figure"},
		{[]string{"-bogus"}, "bogus"},
	}
	for _, tc := range tests {
		o, err := parseOptions(tc.args, io.Discard)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.args, err)
			} else if !o.Quick || !slices.Equal(o.Figures, []string{"kernel"}) {
				t.Errorf("%v: parsed %+v", tc.args, o)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.wantErr)
		}
	}
}

// TestProfileDirMade: -profile makes its directory (the daemons write there at exit, when a
// missing directory could only be logged), and names it when it cannot.
func TestProfileDirMade(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if _, err := parseOptions([]string{"-profile", dir}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("-profile %s: not made (%v)", dir, err)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseOptions([]string{"-profile", filepath.Join(file, "d")}, io.Discard); err == nil || !strings.Contains(err.Error(), "-profile") {
		t.Fatalf("-profile under a file: error %v, want one naming -profile", err)
	}
}

func TestSizes(t *testing.T) {
	full := sizesFor(false)
	if full.DeltaMinBytes < 500_000_000 || full.IngestBytes < 2<<30 || full.ApplyBytes < 1<<30 ||
		full.MemoryBytes[len(full.MemoryBytes)-1] < 4<<30 || full.HistoryVersions != 100 || full.ReadVersions < 2*readsBehind+1 {
		t.Fatalf("full sizes below the issue's: %+v", full)
	}
	quick := sizesFor(true)
	if !slices.Contains(quick.MemoryBytes, quick.IngestBytes) || quick.ReadVersions < 2*readsBehind+1 {
		t.Fatalf("quick sizes: %+v", quick)
	}
	for _, fig := range []string{"delta", "ingest", "memory", "apply", "history", "sync"} {
		if full.diskNeed(fig) <= 0 {
			t.Errorf("no disk estimate for %s", fig)
		}
	}
}

func TestFigureNumber(t *testing.T) {
	want := map[string]string{"delta": "1", "ingest": "2", "reads": "4", "memory": "5", "apply": "6", "history": "7", "kernel": "8", "sync": "9"}
	for fig, num := range want {
		if got := figureNumber(fig); got != num {
			t.Errorf("figureNumber(%s) = %s, want %s", fig, got, num)
		}
	}
}
