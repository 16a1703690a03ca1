//go:build linux

package delta

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// Two applies of one file (docs/format.md Part III §3, One apply at a time). Two patches share a base (v2->v3 and v2->v4),
// or the same patch is applied twice, at the same moment, by goroutines of this process and
// by two processes. The lock on the target serialises them: the file ends as exactly one
// version, exactly one of two conflicting applies succeeds, and the other fails its base
// check (it sees the first one's result) without touching the file.

// sharedBasePatches are two patches from one base: v2->v3 and v2->v4, each with a file
// patched in place (4 MiB, so the read pass is long enough for two applies to overlap) and
// a file carried whole.
type sharedBasePatches struct {
	base   map[string][]byte
	result map[uint64]map[string][]byte // by version: 3, 4
	raw    map[uint64][]byte
}

func newSharedBasePatches(t *testing.T) sharedBasePatches {
	t.Helper()
	// The same seed gives the same base; the density gives a different result.
	base, v3 := syntheticVersions(t, 4<<20, 0.1, 7)
	base4, v4 := syntheticVersions(t, 4<<20, 0.05, 7)
	if sha256.Sum256(base) != sha256.Sum256(base4) {
		t.Fatal("the two patches have different bases")
	}
	s := sharedBasePatches{
		base: map[string][]byte{"model.safetensors": base, "config.json": []byte(`{"step": 2}`)},
		result: map[uint64]map[string][]byte{
			3: {"model.safetensors": v3, "config.json": []byte(`{"step": 3}`)},
			4: {"model.safetensors": v4, "config.json": []byte(`{"step": 4, "x": 1}`)},
		},
		raw: map[uint64][]byte{},
	}
	order := []string{"config.json", "model.safetensors"}
	for v := range s.result {
		s.raw[v], _ = buildTestPatch(t, v, 2, s.base, s.result[v], order)
	}
	return s
}

// setup writes the base files and the two patches into a new directory.
func (s sharedBasePatches) setup(t *testing.T) (dir string, patches map[uint64]string) {
	t.Helper()
	dir = t.TempDir()
	patches = map[uint64]string{}
	for v, raw := range s.raw {
		patches[v] = filepath.Join(dir, fmt.Sprintf("weight_v%06d.safetensors", v))
		if err := os.WriteFile(patches[v], raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range s.base {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, patches
}

// versionOf names the version a file's bytes are: 2, 3 or 4, or 0 for none of them.
func (s sharedBasePatches) versionOf(name string, b []byte) uint64 {
	h := sha256.Sum256(b)
	if h == sha256.Sum256(s.base[name]) {
		return 2
	}
	for v, r := range s.result {
		if h == sha256.Sum256(r[name]) {
			return v
		}
	}
	return 0
}

// applyOutcome is what one of two concurrent applies reported.
type applyOutcome struct {
	version  uint64 // the patch's version
	err      error
	mismatch bool // the error wraps ErrBaseMismatch
}

// checkConcurrentOutcome checks the file and the two outcomes after two concurrent applies.
func (s sharedBasePatches) checkConcurrentOutcome(t *testing.T, dir, name string, outs [2]applyOutcome) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	v := s.versionOf(name, got)
	var ok []uint64
	for _, o := range outs {
		switch {
		case o.err == nil:
			ok = append(ok, o.version)
		case !o.mismatch:
			t.Errorf("apply of v%d failed with something else than a base mismatch: %v", o.version, o.err)
		}
	}
	conflict := outs[0].version != outs[1].version
	switch {
	case v != 3 && v != 4:
		t.Fatalf("%s is v%d after two applies (%v, %v): neither result", name, v, outs[0].err, outs[1].err)
	case conflict && len(ok) != 1:
		t.Fatalf("%s: %d of two conflicting applies succeeded (%v, %v), want exactly one", name, len(ok), outs[0].err, outs[1].err)
	case conflict && ok[0] != v:
		t.Fatalf("%s is v%d but the apply of v%d is the one that succeeded", name, v, ok[0])
	case !conflict && len(ok) != 2:
		t.Fatalf("%s: the same patch applied twice: %v, %v; want both to succeed", name, outs[0].err, outs[1].err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(s.raw)+len(s.base) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("left in the directory: %v", names)
	}
}

func TestApplyConcurrentGoroutines(t *testing.T) {
	s := newSharedBasePatches(t)
	const trials = 20
	for _, name := range []string{"model.safetensors", "config.json"} {
		for _, pair := range [][2]uint64{{3, 4}, {4, 3}, {3, 3}} {
			t.Run(fmt.Sprintf("%s/v%d-v%d", name, pair[0], pair[1]), func(t *testing.T) {
				var waited atomic.Int64 // trials where the two applies overlapped
				defer func() { t.Logf("%d of %d trials overlapped (one apply waited for the other)", waited.Load(), trials) }()
				opts := ApplyOptions{Waiting: func(string) { waited.Add(1) }}
				for range trials {
					dir, patches := s.setup(t)
					var outs [2]applyOutcome
					start := make(chan struct{})
					done := make(chan struct{})
					for i, v := range pair {
						go func() {
							defer func() { done <- struct{}{} }()
							<-start
							_, err := ApplyPatchFileWith(patches[v], filepath.Join(dir, name), opts)
							outs[i] = applyOutcome{version: v, err: err, mismatch: errors.Is(err, ErrBaseMismatch)}
						}()
					}
					close(start)
					<-done
					<-done
					s.checkConcurrentOutcome(t, dir, name, outs)
				}
			})
		}
	}
}

const concurrentChildEnv = "WEIGHTFS_TEST_APPLY_CONCURRENT"

// TestApplyConcurrentProcesses runs the two applies in two processes (this test binary,
// started again), released together through their standard input.
func TestApplyConcurrentProcesses(t *testing.T) {
	s := newSharedBasePatches(t)
	const trials = 8
	for _, name := range []string{"model.safetensors", "config.json"} {
		t.Run(name, func(t *testing.T) {
			for range trials {
				dir, patches := s.setup(t)
				var cmds [2]*exec.Cmd
				var gos [2]interface{ Close() error }
				var outs [2]*bufio.Reader
				for i, v := range []uint64{3, 4} {
					cmd := exec.Command(os.Args[0], "-test.run=^TestApplyConcurrentChild$")
					cmd.Env = append(os.Environ(), concurrentChildEnv+"="+patches[v]+"|"+filepath.Join(dir, name))
					in, err := cmd.StdinPipe()
					if err != nil {
						t.Fatal(err)
					}
					out, err := cmd.StdoutPipe()
					if err != nil {
						t.Fatal(err)
					}
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					cmds[i], gos[i], outs[i] = cmd, in, bufio.NewReader(out)
				}
				// Each child says it is ready, then both are released at once.
				for i := range outs {
					for {
						line, err := outs[i].ReadString('\n')
						if err != nil {
							t.Fatalf("child %d did not start: %v", i, err)
						}
						if line == "ready\n" {
							break
						}
					}
				}
				for _, in := range gos {
					in.Close()
				}
				var res [2]applyOutcome
				for i, v := range []uint64{3, 4} {
					res[i] = applyOutcome{version: v, err: errors.New("no result line")}
					for {
						line, err := outs[i].ReadString('\n')
						if err != nil {
							break
						}
						if rest, ok := strings.CutPrefix(line, "result: "); ok {
							rest = strings.TrimSpace(rest)
							switch {
							case rest == "ok":
								res[i].err = nil
							case strings.HasPrefix(rest, "mismatch: "):
								res[i].err, res[i].mismatch = errors.New(rest), true
							default:
								res[i].err = errors.New(rest)
							}
						}
					}
					if err := cmds[i].Wait(); err != nil {
						t.Fatalf("child %d: %v", i, err)
					}
				}
				s.checkConcurrentOutcome(t, dir, name, res)
			}
		})
	}
}

// TestApplyConcurrentChild is the child of TestApplyConcurrentProcesses; it does nothing
// unless started by it.
func TestApplyConcurrentChild(t *testing.T) {
	spec := os.Getenv(concurrentChildEnv)
	if spec == "" {
		t.Skip("only run as the child of TestApplyConcurrentProcesses")
	}
	patch, target, _ := strings.Cut(spec, "|")
	fmt.Println("ready")
	var b [1]byte
	os.Stdin.Read(b[:]) // returns at EOF, when the parent closes the pipe
	_, err := ApplyPatchFileWith(patch, target, ApplyOptions{})
	switch {
	case err == nil:
		fmt.Println("result: ok")
	case errors.Is(err, ErrBaseMismatch):
		fmt.Printf("result: mismatch: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	default:
		fmt.Printf("result: error: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	}
}

// TestApplyLockHolder holds the lock of a target as another apply would, then: an apply with
// NoWait is refused with ErrLocked, naming this process as the holder, and writes nothing;
// an apply that waits says so once, and finishes when the lock is released.
func TestApplyLockHolder(t *testing.T) {
	s := newSharedBasePatches(t)
	dir, patches := s.setup(t)
	target := filepath.Join(dir, "model.safetensors")
	held, err := lockTarget(target, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ApplyPatchFileWith(patches[3], target, ApplyOptions{NoWait: true})
	holder := fmt.Sprintf("process %d on host ", os.Getpid())
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), holder) || !strings.Contains(err.Error(), target+LockSuffix) {
		t.Fatalf("apply with NoWait while the lock is held: %v, want ErrLocked naming %q", err, holder)
	}
	if got, _ := os.ReadFile(target); s.versionOf("model.safetensors", got) != 2 {
		t.Fatal("the refused apply changed the file")
	}
	waiting := make(chan string, 2)
	done := make(chan error)
	go func() {
		_, err := ApplyPatchFileWith(patches[3], target, ApplyOptions{Waiting: func(h string) { waiting <- h }})
		done <- err
	}()
	if h := <-waiting; !strings.Contains(h, holder) {
		t.Errorf("the waiting apply was told %q, want the holder %q", h, holder)
	}
	held.release()
	if err := <-done; err != nil {
		t.Fatalf("the apply that waited: %v", err)
	}
	if len(waiting) != 0 {
		t.Error("Waiting was called more than once")
	}
	if got, _ := os.ReadFile(target); s.versionOf("model.safetensors", got) != 3 {
		t.Fatal("the apply that waited did not give v3")
	}
	if _, err := os.Lstat(target + LockSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file left after the apply: %v", err)
	}
}

// TestApplyStaleLock: a lock file left by a killed apply (not locked, naming a dead process)
// does not stop the next apply, which removes it.
func TestApplyStaleLock(t *testing.T) {
	s := newSharedBasePatches(t)
	dir, patches := s.setup(t)
	target := filepath.Join(dir, "config.json")
	if err := os.WriteFile(target+LockSuffix, []byte("999999999 gone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyPatchFileWith(patches[4], target, ApplyOptions{NoWait: true}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); s.versionOf("config.json", got) != 4 {
		t.Fatal("not v4")
	}
	if _, err := os.Lstat(target + LockSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale lock file left: %v", err)
	}
}
