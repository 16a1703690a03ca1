package fs

import (
	"bytes"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
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

// streamMount is a read-write mount of a real store (the only version store that streams), with
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
	s, err := store.Open(root, store.Options{Logger: logtest.New(logf)})
	if err != nil {
		t.Fatal(err)
	}
	sm.store = s
	srv, err := Mount(s, sm.mnt, Options{StagingDir: sm.staging, Logger: logtest.New(logf), PollInterval: 50 * time.Millisecond})
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
		if strings.Contains(l, "/"+name+" ") && strings.Contains(l, "goes on in its staging file") {
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

// TestConcurrentStreams writes the shards of a checkpoint from several goroutines at once,
// each in order: every shard streams (nothing staged) and the version reads back exactly.
func TestConcurrentStreams(t *testing.T) {
	sm := newStreamMount(t)
	cfg := gen.ConfigForParams(1_000_000, 3e-6, 9)
	cfg.Shards = 4
	for v := 1; v <= 2; v++ {
		files, err := gen.StreamCheckpointFiles(cfg, v-1)
		if err != nil {
			t.Fatal(err)
		}
		ver := filepath.Join(sm.mnt, VersionName(uint64(v)))
		if err := os.Mkdir(ver, 0o755); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(files))
		for name, data := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f, err := os.Create(filepath.Join(ver, name))
				if err != nil {
					errs <- err
					return
				}
				for off := 0; off < len(data); off += 256 << 10 {
					if _, err := f.Write(data[off:min(off+256<<10, len(data))]); err != nil {
						errs <- err
						return
					}
				}
				errs <- f.Close()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := sm.stagedBytes(t); n != 0 {
			t.Errorf("v%d: %d bytes staged, want 0", v, n)
		}
		mustSeal(t, ver)
		for name, data := range files {
			got, err := os.ReadFile(filepath.Join(ver, name))
			if err != nil {
				t.Fatal(err)
			}
			mustBeSame(t, fmt.Sprintf("v%d %s", v, name), got, data)
		}
	}
}
