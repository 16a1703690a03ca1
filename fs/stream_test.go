package fs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

// streamMount is a read-write mount of a real store (the only backend that streams), with
// its staging directory and its log lines at hand.
type streamMount struct {
	mnt     string
	store   *store.Store
	staging string

	mu  sync.Mutex
	log []string
}

func newStreamMount(t *testing.T) *streamMount {
	t.Helper()
	canMount(t)
	root := filepath.Join(t.TempDir(), "store")
	if err := store.Init(root); err != nil {
		t.Fatal(err)
	}
	sm := &streamMount{mnt: t.TempDir(), staging: t.TempDir()}
	lg := &testLog{t: t}
	logf := func(format string, args ...any) {
		sm.mu.Lock()
		sm.log = append(sm.log, fmt.Sprintf(format, args...))
		sm.mu.Unlock()
		lg.logf(format, args...)
	}
	s, err := store.Open(root, store.Options{Logf: logf})
	if err != nil {
		t.Fatal(err)
	}
	sm.store = s
	srv, err := Mount(s, sm.mnt, Options{StagingDir: sm.staging, Logf: logf, PollInterval: 50 * time.Millisecond})
	if err != nil {
		s.Close()
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			_ = syscall.Unmount(sm.mnt, syscall.MNT_DETACH)
		}
		lg.stop()
		s.Close()
	})
	return sm
}

// stagedBytes is the size of every staging file of the mount.
func (sm *streamMount) stagedBytes(t *testing.T) int64 {
	var n int64
	filepath.Walk(sm.staging, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n
}

// switched reports whether the mount logged that name left streaming mode.
func (sm *streamMount) switched(name string) bool {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for _, l := range sm.log {
		if strings.Contains(l, name+": ") && strings.Contains(l, "goes on in its staging file") {
			return true
		}
	}
	return false
}

// genFiles returns the checkpoint files of a generated model of about params parameters
// after steps steps.
func genFiles(t *testing.T, params int64, steps int) map[string][]byte {
	t.Helper()
	files, err := gen.StreamCheckpointFiles(gen.ConfigForParams(params, 3e-6, 7), steps)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestStreamedVersionsStageNothing writes two versions of a generated checkpoint in order:
// nothing reaches the staging files, the second version stores a small fraction of its
// size, and both read back exactly.
func TestStreamedVersionsStageNothing(t *testing.T) {
	sm := newStreamMount(t)
	for v := 1; v <= 2; v++ {
		files := genFiles(t, 2_500_000, v-1) // ~5 MB: tensors cross the 4 MiB chunks
		ver := filepath.Join(sm.mnt, VersionName(uint64(v)))
		if err := os.Mkdir(ver, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			writeFile(t, filepath.Join(ver, name), data)
		}
		if n := sm.stagedBytes(t); n != 0 {
			t.Errorf("v%d: %d bytes in staging files before the seal, want 0", v, n)
		}
		mustSeal(t, ver)
		var logical int64
		for name, data := range files {
			got, err := os.ReadFile(filepath.Join(ver, name))
			if err != nil {
				t.Fatal(err)
			}
			mustBeSame(t, fmt.Sprintf("v%d %s", v, name), got, data)
			logical += int64(len(data))
		}
		info, err := sm.store.Version(uint64(v))
		if err != nil {
			t.Fatal(err)
		}
		if v == 2 && info.StoredBytes*10 > logical {
			t.Errorf("v2 stored %d bytes of %d", info.StoredBytes, logical)
		}
	}
}

func mustBeSame(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes, want %d, first difference at %d", what, len(got), len(want), i)
	}
}

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
		f := openRW(t, filepath.Join(dir, name), 0)
		h := len(data) / 2
		mustWriteAt(t, f, data[:h], 0)
		if err := f.Truncate(int64(len(data))); err != nil {
			t.Fatal(err)
		}
		mustWriteAt(t, f, data[h:], int64(h))
		mustClose(t, f)
		return data
	}},
	{"truncate to the same size", false, func(t *testing.T, dir, name string, data []byte) []byte {
		f := openRW(t, filepath.Join(dir, name), 0)
		h := len(data) / 2
		mustWriteAt(t, f, data[:h], 0)
		if err := f.Truncate(int64(h)); err != nil {
			t.Fatal(err)
		}
		mustWriteAt(t, f, data[h:], int64(h))
		mustClose(t, f)
		return data
	}},
	{"rewritten from the start", false, func(t *testing.T, dir, name string, data []byte) []byte {
		p := filepath.Join(dir, name)
		writeFile(t, p, data[:len(data)/2])
		writeFile(t, p, data) // O_TRUNC: the stream starts over
		return data
	}},
	{"fallocate", true, func(t *testing.T, dir, name string, data []byte) []byte {
		f := openRW(t, filepath.Join(dir, name), 0)
		h := len(data) / 2
		mustWriteAt(t, f, data[:h], 0)
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, int64(len(data))); err != nil {
			t.Fatal(err)
		}
		mustWriteAt(t, f, data[h:], int64(h))
		mustClose(t, f)
		return data
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

// TestStreamingMatchesLocalDir applies random operations, most of them appends that keep
// files streaming, to an open version of a real store and to a local directory, compares the
// two now and then (reads: they switch files to staging), seals, and compares the sealed
// version with the reference. Several versions run, so files are diffed against the last.
func TestStreamingMatchesLocalDir(t *testing.T) {
	sm := newStreamMount(t)
	rng := rand.New(rand.NewPCG(17, 18))
	contents := [][]byte{genFiles(t, 200_000, 0)["model.safetensors"], genFiles(t, 200_000, 1)["model.safetensors"],
		genFiles(t, 200_000, 2)["model.safetensors"], pattern(3, 150_000)}
	names := []string{"a", "b", "c", "d/e", "d/f"}
	for v := uint64(1); v <= 3; v++ {
		ref := t.TempDir()
		ver := filepath.Join(sm.mnt, VersionName(v))
		for _, d := range []string{ref, ver} {
			if err := os.MkdirAll(filepath.Join(d, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		target := map[string][]byte{}    // what each file is being written towards
		handles := map[string]*os.File{} // root and name -> a handle kept open (it follows renames)
		for step := 0; step < 150; step++ {
			name := names[rng.IntN(len(names))]
			var desc string
			var op func(root string) error
			switch k := rng.IntN(20); {
			case k < 13: // append the next piece of the file's target: the streaming pattern
				if target[name] == nil {
					target[name] = contents[rng.IntN(len(contents))]
				}
				data := target[name]
				piece := int64(1 + rng.IntN(120_000))
				keep := rng.IntN(4) != 0 // mostly through a handle kept open: long streams
				desc = "append to " + name
				op = func(root string) error {
					key := root + "\x00" + name
					f := handles[key]
					if f == nil {
						var err error
						if f, err = os.OpenFile(filepath.Join(root, name), os.O_RDWR|os.O_CREATE, 0o644); err != nil {
							return err
						}
						if keep {
							handles[key] = f
						}
					}
					st, err := f.Stat()
					if err != nil {
						return err
					}
					off := st.Size()
					n := min(piece, max(int64(len(data))-off, 0))
					var werr error
					if n > 0 && off < int64(len(data)) {
						_, werr = f.WriteAt(data[off:off+n], off)
					}
					if handles[key] == f {
						return werr
					}
					return firstErr(werr, f.Close())
				}
			case k == 13:
				off := rng.Int64N(300_000)
				data := pattern(step, 1+rng.IntN(5000))
				desc = fmt.Sprintf("write %s at %d+%d", name, off, len(data))
				op = func(root string) error {
					f, err := os.OpenFile(filepath.Join(root, name), os.O_RDWR|os.O_CREATE, 0o644)
					if err != nil {
						return err
					}
					_, werr := f.WriteAt(data, off)
					return firstErr(werr, f.Close())
				}
			case k == 14:
				size := rng.Int64N(300_000)
				if rng.IntN(3) == 0 {
					size = 0
					delete(target, name)
				}
				desc = fmt.Sprintf("truncate %s to %d", name, size)
				op = func(root string) error { return os.Truncate(filepath.Join(root, name), size) }
			case k == 15:
				to := names[rng.IntN(len(names))]
				desc = fmt.Sprintf("rename %s to %s", name, to)
				target[to], target[name] = target[name], nil
				op = func(root string) error { return os.Rename(filepath.Join(root, name), filepath.Join(root, to)) }
			case k == 16:
				desc = "unlink " + name
				delete(target, name)
				op = func(root string) error { return os.Remove(filepath.Join(root, name)) }
			case k == 17:
				desc = "read " + name
				var got [2][]byte
				i := 0
				op = func(root string) error {
					b, err := os.ReadFile(filepath.Join(root, name))
					got[i] = b
					i++
					if i == 2 && !bytes.Equal(got[0], got[1]) {
						t.Fatalf("step %d: read %s: %d bytes on the mount, %d in the reference", step, name, len(got[1]), len(got[0]))
					}
					return err
				}
			default:
				desc = "write whole " + name
				data := contents[rng.IntN(len(contents))]
				target[name] = data
				op = func(root string) error { return os.WriteFile(filepath.Join(root, name), data, 0o644) }
			}
			refErr, verErr := op(ref), op(ver)
			if errnoOf(refErr) != errnoOf(verErr) {
				t.Fatalf("v%d step %d: %s: reference %v, mount %v", v, step, desc, refErr, verErr)
			}
		}
		for _, f := range handles {
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
		want := treeOf(t, ref)
		mustSeal(t, ver)
		sameTree(t, fmt.Sprintf("sealed v%d", v), treeOf(t, ver), want)
	}
}
