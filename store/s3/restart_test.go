package s3

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weightfs/weightfs/store"
)

// TestS3WriterRestart: a writer that comes back (with its cache, or on a new machine with a
// fresh one) goes on where the store is; objects left by a writer that was killed before its
// seal (a child process, SIGKILL: its lease stays) are removed, and nothing sealed is
// touched.
func TestS3WriterRestart(t *testing.T) {
	if os.Getenv(crashWriterEnv) != "" {
		crashingWriter(t)
		return
	}
	_, url := startInitialized(t)
	cache := t.TempDir()
	m := newTestModel(11, 80_000, 20_000)
	want := map[uint64]map[string][]byte{}
	for v := uint64(1); v <= 3; v++ {
		if v > 1 {
			m.step()
		}
		want[v] = m.files(t)
	}
	// The writer is a child process, killed in the middle of version 3: its objects are
	// uploaded, its manifest is not, and its lease stays until it expires.
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command(os.Args[0], "-test.run=^TestS3WriterRestart$")
	cmd.Env = append(os.Environ(), crashWriterEnv+"="+url+"\n"+cache+"\n"+ready)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var sealed int
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
			if _, err := fmt.Sscan(string(b), &sealed); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the writer did not get ready")
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := BreakLease(url, Config{}, nil); err != nil {
		t.Fatal(err)
	}

	// Back with the same cache: the dirty index makes it sweep the leftovers.
	w2 := openTestStore(t, url, store.Options{CacheDir: cache})
	if n := countObjects(t, w2); n != sealed {
		t.Fatalf("after the restart: %d objects, want the %d sealed ones", n, sealed)
	}
	commitTree(t, w2, 3, want[3])
	w2.Close()

	// On another machine: a fresh cache, built from the store alone.
	m.step()
	want[4] = m.files(t)
	w3 := openTestStore(t, url, store.Options{})
	commitTree(t, w3, 4, want[4])
	// A reader that joins late builds its copy of the latest version from the store.
	r := openTestStore(t, url, store.Options{ReadOnly: true, Materialize: true})
	for v, files := range want {
		for p, b := range files {
			mustEqualBytes(t, fmt.Sprintf("v%d %s", v, p), readWhole(t, r, v, p), b)
		}
	}
	if _, err := r.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// crashWriterEnv makes TestS3WriterRestart the writer that is killed (crashingWriter):
// "URL\nCACHE\nREADY".
const crashWriterEnv = "WEIGHTFS_TEST_CRASH_WRITER"

// crashingWriter seals versions 1 and 2, uploads the objects of version 3 (its seal stops
// after SyncObjects, before the manifest), writes the number of objects of the sealed versions to the ready file and waits to be
// killed.
func crashingWriter(t *testing.T) {
	args := strings.Split(os.Getenv(crashWriterEnv), "\n")
	url, cache, ready := args[0], args[1], args[2]
	// The seal of version 3 stops once its objects are durable (its pack and pack index
	// uploaded, store format 3), before its manifest: as if the process died there.
	var crash atomic.Bool
	w := openTestStore(t, url, store.Options{CacheDir: cache, Failpoint: func(point string) error {
		if crash.Load() && point == "seal-objects-synced" {
			return errors.New("killed after the objects' sync")
		}
		return nil
	}})
	m := newTestModel(11, 80_000, 20_000)
	for v := uint64(1); v <= 2; v++ {
		if v > 1 {
			m.step()
		}
		commitTree(t, w, v, m.files(t))
	}
	sealed := countObjects(t, w)
	m.step()
	vw, err := w.NewVersion(3)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range m.files(t) {
		if err := vw.AddFile(p, bytesReaderAt(b), int64(len(b)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	crash.Store(true)
	if _, err := vw.Seal(); err == nil {
		t.Fatal("the seal of version 3 went through its failpoint")
	}
	if n := countObjects(t, w); n <= sealed {
		t.Fatalf("the unsealed version uploaded nothing (%d objects, %d sealed)", n, sealed)
	}
	if err := os.WriteFile(ready, []byte(fmt.Sprint(sealed)), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Hour) // killed here
}

// countObjects counts the objects the store holds, as the store sees them (Usage): loose
// objects and those its pack indexes name (store format 3), less those a sweep deleted. An
// object in a pack stays in the pack's bytes until gc rewrites it; the backend's own
// ListObjects lists loose objects only.
func countObjects(t testing.TB, s *store.Store) int {
	t.Helper()
	u, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	return u.Objects
}

// bytesReaderAt serves a byte slice as an io.ReaderAt.
type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
