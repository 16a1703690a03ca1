package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// fallbackCase writes one file with some operation the stream cannot follow (or can) and
// returns the content the file must have at the seal; the file is called name in dir.
type fallbackCase struct {
	name     string
	switches bool // the file must have left streaming mode
	do       func(t *testing.T, dir, name string, data []byte) []byte
}

func openRW(t *testing.T, p string, flags int) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|flags, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustWriteAt(t *testing.T, f *os.File, b []byte, off int64) {
	t.Helper()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func mustClose(t *testing.T, f *os.File) {
	t.Helper()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeAroundHalf writes the first half of data to a new file at p, calls between (which must
// succeed), writes the rest and closes the file.
func writeAroundHalf(t *testing.T, p string, data []byte, between func(f *os.File) error) []byte {
	t.Helper()
	f := openRW(t, p, 0)
	h := len(data) / 2
	mustWriteAt(t, f, data[:h], 0)
	if err := between(f); err != nil {
		t.Fatal(err)
	}
	mustWriteAt(t, f, data[h:], int64(h))
	mustClose(t, f)
	return data
}

var fallbackCases = []fallbackCase{
	{"in order", false, func(t *testing.T, dir, name string, data []byte) []byte {
		f := openRW(t, filepath.Join(dir, name), 0)
		for off := 0; off < len(data); off += 300_001 {
			mustWriteAt(t, f, data[off:min(off+300_001, len(data))], int64(off))
		}
		mustClose(t, f)
		return data
	}},
	{"out of order", true, func(t *testing.T, dir, name string, data []byte) []byte {
		f := openRW(t, filepath.Join(dir, name), 0)
		h := len(data) / 2
		mustWriteAt(t, f, data[:h], 0)
		mustWriteAt(t, f, data[h+1000:], int64(h+1000))
		mustWriteAt(t, f, data[h:h+1000], int64(h))
		mustClose(t, f)
		return data
	}},
	{"overwrite", true, func(t *testing.T, dir, name string, data []byte) []byte {
		f := openRW(t, filepath.Join(dir, name), 0)
		mustWriteAt(t, f, data, 0)
		want := append([]byte(nil), data...)
		copy(want[100:], "patched")
		mustWriteAt(t, f, []byte("patched"), 100)
		mustClose(t, f)
		return want
	}},
	{"read while writing", true, func(t *testing.T, dir, name string, data []byte) []byte {
		f := openRW(t, filepath.Join(dir, name), 0)
		h := len(data) / 3
		mustWriteAt(t, f, data[:h], 0)
		got := make([]byte, 5000)
		if _, err := f.ReadAt(got, int64(h-5000)); err != nil {
			t.Fatal(err)
		}
		mustBeSame(t, "read while writing", got, data[h-5000:h])
		mustWriteAt(t, f, data[h:], int64(h))
		mustClose(t, f)
		return data
	}},
	{"read after close", false, func(t *testing.T, dir, name string, data []byte) []byte {
		p := filepath.Join(dir, name)
		writeFile(t, p, data)
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		mustBeSame(t, "read after close", got, data)
		return data
	}},
	{"truncate shorter", true, func(t *testing.T, dir, name string, data []byte) []byte {
		f := openRW(t, filepath.Join(dir, name), 0)
		h := len(data) / 2
		mustWriteAt(t, f, data[:h], 0)
		if err := f.Truncate(int64(h / 2)); err != nil {
			t.Fatal(err)
		}
		mustWriteAt(t, f, data[h/2:], int64(h/2))
		mustClose(t, f)
		return data
	}},
	{"truncate longer", true, func(t *testing.T, dir, name string, data []byte) []byte {
		return writeAroundHalf(t, filepath.Join(dir, name), data, func(f *os.File) error { return f.Truncate(int64(len(data))) })
	}},
	{"truncate to the same size", false, func(t *testing.T, dir, name string, data []byte) []byte {
		return writeAroundHalf(t, filepath.Join(dir, name), data, func(f *os.File) error { return f.Truncate(int64(len(data) / 2)) })
	}},
	{"rewritten from the start", false, func(t *testing.T, dir, name string, data []byte) []byte {
		p := filepath.Join(dir, name)
		writeFile(t, p, data[:len(data)/2])
		writeFile(t, p, data) // O_TRUNC: the stream starts over
		return data
	}},
	{"fallocate", true, func(t *testing.T, dir, name string, data []byte) []byte {
		return writeAroundHalf(t, filepath.Join(dir, name), data, func(f *os.File) error { return syscall.Fallocate(int(f.Fd()), 0, 0, int64(len(data))) })
	}},
	{"appended after close", true, func(t *testing.T, dir, name string, data []byte) []byte {
		p := filepath.Join(dir, name)
		h := len(data) / 2
		writeFile(t, p, data[:h])
		f := openRW(t, p, os.O_APPEND)
		if _, err := f.Write(data[h:]); err != nil {
			t.Fatal(err)
		}
		mustClose(t, f)
		return data
	}},
	{"renamed while open", false, func(t *testing.T, dir, name string, data []byte) []byte {
		tmp := filepath.Join(dir, name+".tmp")
		f := openRW(t, tmp, 0)
		h := len(data) / 2
		mustWriteAt(t, f, data[:h], 0)
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		mustWriteAt(t, f, data[h:], int64(h))
		mustClose(t, f)
		return data
	}},
	{"unlinked while open", true, func(t *testing.T, dir, name string, data []byte) []byte {
		p := filepath.Join(dir, name)
		f := openRW(t, p, 0)
		h := len(data) / 2
		mustWriteAt(t, f, data[:h], 0)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, h)
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		mustBeSame(t, "the unlinked file", got, data[:h])
		mustClose(t, f)
		writeFile(t, p, data)
		return data
	}},
	{"shorter than its header says", false, func(t *testing.T, dir, name string, data []byte) []byte {
		writeFile(t, filepath.Join(dir, name), data[:len(data)-3])
		return data[:len(data)-3]
	}},
	{"longer than its header says", false, func(t *testing.T, dir, name string, data []byte) []byte {
		want := append(append([]byte(nil), data...), "tail"...)
		writeFile(t, filepath.Join(dir, name), want)
		return want
	}},
}

// TestStreamFallbacks takes every way a file can leave (or stay in) streaming mode, in a
// version diffed against the one before, and checks the sealed bytes; a handle kept open
// across the seal reads the sealed file.
func TestStreamFallbacks(t *testing.T) {
	sm := newStreamMount(t)
	base := genFiles(t, 400_000, 0)["model.safetensors"]
	v1 := filepath.Join(sm.mnt, VersionName(1))
	if err := os.Mkdir(v1, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range fallbackCases {
		writeFile(t, filepath.Join(v1, fmt.Sprintf("f%02d.safetensors", i)), base)
	}
	mustSeal(t, v1)
	next := genFiles(t, 400_000, 1)["model.safetensors"]
	v2 := filepath.Join(sm.mnt, VersionName(2))
	if err := os.Mkdir(v2, 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for i, c := range fallbackCases {
		name := fmt.Sprintf("f%02d.safetensors", i)
		want[name] = c.do(t, v2, name, next)
		if got := sm.switched(name); got != c.switches {
			t.Errorf("%s (%s): left streaming mode %v, want %v", name, c.name, got, c.switches)
		}
	}
	// A handle open across the seal, on a file that never left streaming mode.
	held := openRW(t, filepath.Join(v2, "held.safetensors"), 0)
	mustWriteAt(t, held, next, 0)
	want["held.safetensors"] = next
	mustSeal(t, v2)
	got := make([]byte, len(next))
	if _, err := held.ReadAt(got, 0); err != nil {
		t.Fatalf("read through a handle open across the seal: %v", err)
	}
	mustBeSame(t, "held across the seal", got, next)
	held.Close()
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(v2, name))
		if err != nil {
			t.Fatal(err)
		}
		mustBeSame(t, name, got, w)
	}
	if ents, _ := os.ReadDir(v2); len(ents) != len(want) {
		t.Errorf("sealed version has %d files, want %d", len(ents), len(want))
	}
}
