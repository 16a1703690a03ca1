package store

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// longPath is a version-relative path of n bytes made of names of 255 bytes (the last one
// ends in suffix), letters changing from one name to the next.
func longPath(n int, suffix string) string {
	var b strings.Builder
	for i := 0; ; i++ {
		rest := n - b.Len()
		if rest <= 255 {
			b.WriteString(strings.Repeat("f", rest-len(suffix)) + suffix)
			return b.String()
		}
		name := strings.Repeat(string(rune('a'+i%26)), 255)
		if rest-256 < len(suffix)+1 { // keep a last name long enough for the suffix
			name = name[:rest-len(suffix)-2]
		}
		b.WriteString(name + "/")
	}
}

// The limits are Linux's: a name of up to 255 bytes (NAME_MAX), a path of any length. A path
// of 4095 bytes (PATH_MAX less its NUL) and one of 9000 (a tree made through descriptors) are
// taken; a name of 256 bytes is refused with ErrNameTooLong, naming the name.
func TestPathLimits(t *testing.T) {
	for _, n := range []int{255, 3072, 3073, 4095, 4096, 9000} {
		p := longPath(n, ".bin")
		if len(p) != n {
			t.Fatalf("test setup: a path of %d bytes, want %d", len(p), n)
		}
		if err := checkPath(p); err != nil {
			t.Errorf("a path of %d bytes: %v", n, err)
		}
	}
	long := strings.Repeat("n", 256)
	for _, p := range []string{long, "d/" + long, long + "/f", longPath(3700, "") + "/" + long} {
		err := checkPath(p)
		if !errors.Is(err, ErrNameTooLong) || !strings.Contains(err.Error(), "is 256 bytes, more than 255") {
			t.Errorf("a name of 256 bytes in a path of %d: %v, want ErrNameTooLong naming it", len(p), err)
		}
	}
	// The manifest says which: format 1 up to 3072 bytes (what the readers of format 1
	// accept), format 2 past it, so that those readers refuse it as a format they do not
	// know rather than judge it damaged.
	for _, c := range []struct {
		n    int
		want uint16
	}{{3072, manifestFormatVersion}, {3073, manifestLongPaths}, {9000, manifestLongPaths}} {
		m := &manifest{Version: 1, Dirs: []manifestDir{{Path: longPath(c.n, ""), Mode: 0o755}}}
		b, err := encodeManifestChecked(m, maxManifestLen)
		if err != nil {
			t.Fatalf("a manifest with a path of %d bytes: %v", c.n, err)
		}
		if got := binary.LittleEndian.Uint16(b[4:]); got != c.want {
			t.Errorf("a manifest with a path of %d bytes: format version %d, want %d", c.n, got, c.want)
		}
		binary.LittleEndian.PutUint16(b[4:], manifestTensorDigests+1)
		if _, err := decodeManifest(b); !errors.Is(err, ErrUnsupportedVersion) {
			t.Errorf("a manifest of format %d: %v", manifestTensorDigests+1, err)
		}
	}
}

// A tree whose paths take every directory it is written below past PATH_MAX (the commit's
// source, the materialized copy, an export's target) is committed, read, brought forward to
// a second version, read from a reopened store and exported exactly.
func TestLongPathsRoundTrip(t *testing.T) {
	deepST := longPath(4000, ".safetensors") // relative to the version: below PATH_MAX
	deepBlob := filepath.Dir(deepST) + "/" + strings.Repeat("b", 200) + ".json"
	deeper := longPath(9000, ".txt") // past PATH_MAX by itself
	rng := rand.New(rand.NewPCG(27, 16))
	w := bf16Like(rng, 64<<10)
	v1 := map[string][]byte{
		deepST:        safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{int64(len(w) / 2)}, w}),
		deepBlob:      []byte(`{"deep": true}`),
		deeper:        randomBytes(rng, 5000),
		"config.json": []byte("{}"),
	}
	w2 := perturb(rng, w, 2, 0.01)
	v2 := map[string][]byte{
		deepST:        safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{int64(len(w2) / 2)}, w2}),
		deepBlob:      []byte(`{"deep": 2}`),
		"config.json": []byte("{}"),
	}
	s, root := newLooseStore(t, Options{})
	_, src1 := commitTree(t, s, 1, v1)
	// Its tensors' xxh3-128 make it format 4, which holds long paths too (format 2 is what a
	// manifest of long paths and no digests is: TestPathLimits).
	if got, err := s.be.GetManifest(1); err != nil || binary.LittleEndian.Uint16(got[4:]) != manifestTensorDigests {
		t.Fatalf("manifest of version 1: %v, want format version %d", err, manifestTensorDigests)
	}
	check := func(when string, s *Store, v uint64, files map[string][]byte, src string) {
		t.Helper()
		for p, want := range files {
			mustEqualBytes(t, when+": read "+p[max(0, len(p)-40):], readWhole(t, s, v, p), want)
		}
		sameTree(t, when+": export", exportHashes(t, s, v), treeHashes(t, src))
	}
	check("version 1", s, 1, v1, src1)
	_, src2 := commitTree(t, s, 2, v2)
	check("version 2", s, 2, v2, src2)
	check("version 1 after version 2", s, 1, v1, src1)
	// The materialized copy holds version 2, its deepest file among them.
	copyDir := filepath.Join(s.cache.dir, "materialized")
	if st, err := statIn(copyDir, deepST); err != nil || st.Size() != int64(len(v2[deepST])) {
		t.Fatalf("the materialized copy's %d-byte path: %v", len(deepST), err)
	}
	if _, err := statIn(copyDir, deeper); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("the materialized copy keeps a file version 2 dropped: %v", err)
	}
	rep, err := s.Verify(nil)
	if err != nil || len(rep.Damaged) != 0 {
		t.Fatalf("verify: %v, damaged %v", err, rep.Damaged)
	}
	if err := closeStore(t, s); err != nil {
		t.Fatal(err)
	}
	// Reopened: the copy is adopted (every file found at its path) and read.
	s = openLoose(t, root, Options{})
	check("reopened, version 2", s, 2, v2, src2)
	check("reopened, version 1", s, 1, v1, src1)
}
