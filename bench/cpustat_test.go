package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		user, sys time.Duration
		bad       bool
	}{
		{"plain", "4242 (weightfs) S 1 4242 4242 0 -1 4194560 100 0 0 0 512 37 0 0 20 0 9 0 100 0 0", 5120 * time.Millisecond, 370 * time.Millisecond, false},
		{"name with spaces and parens", "7 (a) b) (c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0", 30 * time.Millisecond, 40 * time.Millisecond, false},
		{"no name", "7 weightfs R 1", 0, 0, true},
		{"short", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 3", 0, 0, true},
		{"not a number", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 3x 4 0", 0, 0, true},
		{"negative", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 -3 4 0", 0, 0, true},
	} {
		got, err := parseProcStat([]byte(tc.in))
		if tc.bad {
			if err == nil {
				t.Errorf("%s: no error, got %+v", tc.name, got)
			}
			continue
		}
		if err != nil || got.User != tc.user || got.Sys != tc.sys {
			t.Errorf("%s: %+v, %v; want %v + %v", tc.name, got, err, tc.user, tc.sys)
		}
	}
	if got := cpuPerGB(cpuTime{User: 2 * time.Second, Sys: 500 * time.Millisecond}, 2_000_000_000); got != 1.25 {
		t.Errorf("cpuPerGB = %v, want 1.25", got)
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 100 0 0 0 12 34 0 0 20 0 1 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseProcStat(b)
		if err == nil && (c.User < 0 || c.Sys < 0) {
			t.Fatalf("negative time %+v", c)
		}
	})
}

// TestReadCPUSelf reads this process's own CPU time, which only grows.
func TestReadCPUSelf(t *testing.T) {
	a, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 20_000_000 {
		x += i ^ (x >> 3)
	}
	_ = x
	b, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if b.sub(a).Seconds() < 0 {
		t.Fatalf("CPU time went back: %+v then %+v", a, b)
	}
}

func TestSplitByBytes(t *testing.T) {
	files := []string{"a", "b", "c", "d"}
	size := map[string]int64{"a": 10, "b": 100, "c": 90, "d": 5}
	got := splitByBytes(files, size, 2)
	// Largest first: b -> 0, c -> 1, a -> 1 (90 < 100), d -> 0 (a tie at 100: the lowest index).
	want := [][]string{{"b", "d"}, {"a", "c"}}
	if len(got) != 2 || !equalStrings(got[0], want[0]) || !equalStrings(got[1], want[1]) {
		t.Fatalf("split = %v, want %v", got, want)
	}
	if one := splitByBytes(files, size, 1); len(one) != 1 || !equalStrings(one[0], files) {
		t.Fatalf("one writer: %v", one)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestWriteTreeConcurrentCopiesBytes(t *testing.T) {
	files := map[string][]byte{
		"config.json":                      []byte(`{"a":1}`),
		"model-00001-of-00002.safetensors": patterned(3<<20+5, 1),
		"model-00002-of-00002.safetensors": patterned(2<<20+7, 2),
		"sub/empty":                        nil,
	}
	for _, syncFiles := range []bool{false, true} {
		src := makeTree(t, files)
		dst := filepath.Join(t.TempDir(), "out")
		st, err := writeTreeConcurrent(src, dst, 1<<20, 2, syncFiles)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("sync %v: %s differs after the copy (%v)", syncFiles, name, err)
			}
			total += int64(len(want))
		}
		if st.Bytes != total || st.Files != len(files) {
			t.Fatalf("stats %+v, want %d bytes in %d files", st, total, len(files))
		}
		if st.LastWrite.Before(st.Start) || st.End.Before(st.LastWrite) {
			t.Fatalf("times out of order: %+v", st)
		}
	}
}
