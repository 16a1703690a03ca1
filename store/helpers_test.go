package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/testfiles"

	"github.com/weightfs/weightfs/delta"
)

// testTensor is a tensor of a handmade safetensors file.
type testTensor struct {
	name  string
	dtype delta.DType
	shape []int64
	data  []byte
}

// safetensorsFile builds a valid safetensors file.
func safetensorsFile(t testing.TB, tensors ...testTensor) []byte {
	t.Helper()
	hdrTensors := make([]delta.Tensor, len(tensors))
	for i, tt := range tensors {
		hdrTensors[i] = delta.Tensor{Name: tt.name, DType: tt.dtype, Shape: tt.shape}
	}
	hdr, err := delta.EncodeHeader(nil, hdrTensors)
	if err != nil {
		t.Fatalf("encode header: %v", err)
	}
	out := append([]byte(nil), hdr...)
	for _, tt := range tensors {
		out = append(out, tt.data...)
	}
	return out
}

// rawSafetensors builds a safetensors file from a JSON header (padded) and data, for bad
// inputs that EncodeHeader would refuse to write.
func rawSafetensors(header string, data []byte) []byte {
	for len(header)%8 != 0 {
		header += " "
	}
	out := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(out, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

// The bytes tests commit (internal/testfiles, shared with the other store package's tests).
var (
	randomBytes = testfiles.RandomBytes
	bf16Like    = testfiles.BF16Like
	perturb     = testfiles.Perturb
	writeTree   = testfiles.WriteTree
)

// treeHashes maps every regular file under dir to its SHA-256 (hex), and every directory to
// "dir". It reads through an os.Root on dir, so a path may take dir past PATH_MAX.
func treeHashes(t testing.TB, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			m[rel] = "dir"
			return nil
		}
		b, err := root.ReadFile(filepath.FromSlash(rel))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		m[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameTree(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if got[k] != want[k] {
			t.Errorf("%s: %s: got %q, want %q", what, k, got[k], want[k])
		}
	}
}

// newStore initialises a store in a temporary directory and opens it for writing.
func newStore(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	if err := Init(root); err != nil {
		t.Fatal(err)
	}
	return openStore(t, root, opts), root
}

func openStore(t testing.TB, root string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = logtest.New(t.Logf)
	}
	s, err := Open(root, opts)
	if err != nil {
		t.Fatalf("open %s: %v", root, err)
	}
	t.Cleanup(func() { closeStore(t, s) })
	return s
}

// Every store a test opens ends in closeStore: Verify, then Close, as bbolt runs its check
// after every test. So every test also checks that what it did left a store that verifies.

// damagedOnPurpose holds the stores whose tests damaged them on purpose (expectDamage).
var damagedOnPurpose sync.Map // *Store -> struct{}

// expectDamage says that the test damaged s on purpose: its closeStore then requires Verify to
// find the damage, rather than failing the test for it.
func expectDamage(s *Store) { damagedOnPurpose.Store(s, struct{}{}) }

// closeStore verifies s and closes it, returning Close's error. Any damage Verify finds fails
// the test, unless the test damaged the store on purpose (expectDamage); then finding none
// fails it. A store the test closed already is left alone, and a test that has failed
// already is not verified (its store may be anywhere).
func closeStore(t testing.TB, s *Store) error {
	t.Helper()
	_, onPurpose := damagedOnPurpose.LoadAndDelete(s)
	if !t.Failed() && !t.Skipped() {
		rep, err := s.Verify(nil)
		switch {
		case errors.Is(err, ErrClosed):
		case onPurpose:
			if err == nil {
				t.Errorf("store %s was damaged on purpose, but Verify found nothing", s.Root())
			}
		case err != nil:
			t.Errorf("verify of store %s before it closes: %v", s.Root(), err)
			for _, d := range rep.Damaged {
				t.Errorf("  %s", d)
			}
		}
	}
	return s.Close()
}

// commitAll commits versions[i] as version i+1, in order.
func commitAll(t testing.TB, s *Store, versions []map[string][]byte) {
	t.Helper()
	for i, files := range versions {
		commitTree(t, s, uint64(i+1), files)
	}
}

func commitTree(t testing.TB, s *Store, v uint64, files map[string][]byte) (VersionInfo, string) {
	t.Helper()
	dir := writeTree(t, t.TempDir(), files)
	info, err := s.Commit(dir, CommitOptions{Version: v})
	if err != nil {
		t.Fatalf("commit version %d: %v", v, err)
	}
	return info, dir
}

func exportHashes(t testing.TB, s *Store, v uint64) map[string]string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "export")
	if err := s.Export(v, out, nil); err != nil {
		t.Fatalf("export version %d: %v", v, err)
	}
	return treeHashes(t, out)
}

// readWhole reads a file of a version through OpenFile.
func readWhole(t testing.TB, s *Store, v uint64, p string) []byte {
	t.Helper()
	f, err := s.OpenFile(v, p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if n, err := f.ReadAt(b, 0); n != len(b) {
		t.Fatalf("read %s of version %d: %d of %d bytes: %v", p, v, n, len(b), err)
	}
	return b
}

func mustEqualBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from the %d wanted, first at %d", what, len(got), len(want), i)
	}
}

// logLines collects a store's log (Options.Logger: logtest.New(l.logf)) for assertions,
// echoing each line to t when t is set.
type logLines struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	line := strings.TrimSpace(fmt.Sprintf(format, args...))
	if l.t != nil {
		l.t.Log(line)
	}
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

// has reports whether one line holds every one of parts.
func (l *logLines) has(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
