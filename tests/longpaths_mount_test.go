package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/internal/testfiles"
)

// deepPath is a slash path of n bytes made of 255-byte names (the last one ends in suffix).
func deepPath(n int, suffix string) string {
	var b strings.Builder
	for i := 0; ; i++ {
		rest := n - b.Len()
		if rest <= 255 {
			b.WriteString(strings.Repeat("z", rest-len(suffix)) + suffix)
			return b.String()
		}
		name := strings.Repeat(string(rune('a'+i%26)), 255)
		if rest-256 < len(suffix)+1 {
			name = name[:rest-len(suffix)-2]
		}
		b.WriteString(name + "/")
	}
}

// hashesIn maps every regular file below dir to its SHA-256, read through an os.Root.
func hashesIn(t *testing.T, dir string) map[string]string {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	got := map[string]string{}
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := root.ReadFile(filepath.FromSlash(p))
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		got[p] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatalf("hash %s: %v", dir, err)
	}
	return got
}

func hashesOf(files map[string][]byte) map[string]string {
	out := map[string]string{}
	for p, b := range files {
		sum := sha256.Sum256(b)
		out[p] = hex.EncodeToString(sum[:])
	}
	return out
}

// TestMountLongPaths (issue 27 item 16): a version holds every tree ext4 holds. Two versions
// of a sharded checkpoint are written through a writer mount below a directory of 3,600
// bytes, with a plain file at a version-relative path of 4,000 bytes and one of 4,095 bytes
// below a subdirectory (a PATH_MAX-1 path made in a directory of the mount, as pjdfstest
// makes them), sealed with DONE, read back through a read-only mount after a remount (the
// second version's materialized copy, the first's file copies), exported, and committed from
// a directory deeper than PATH_MAX: every file's SHA-256 is the one written.
func TestMountLongPaths(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	rw, ro := rwAndROMountPoints(t, work)
	prefix := path.Dir(deepPath(3600, "x"))
	series := testfiles.ShardedSeries(t, 2, 16)
	want := map[int]map[string][]byte{}
	for i, files := range series {
		v := map[string][]byte{}
		for p, b := range files {
			v[prefix+"/"+p] = b
		}
		v[deepPath(4000, ".txt")] = []byte("a plain file 4000 bytes deep, version " + string(rune('1'+i)))
		v["pjd/"+deepPath(4095, "")] = []byte("PATH_MAX-1 below a directory of the version")
		want[i+1] = v
	}

	d := startMount(t, storeDir, rw)
	for v := 1; v <= 2; v++ {
		dst := versionDir(rw, v)
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		testfiles.WriteTree(t, dst, want[v])
		run(t, "touch", filepath.Join(dst, "DONE"))
		sameHashes(t, "writer mount", hashesIn(t, versionDir(rw, v)), hashesOf(want[v]))
	}
	d.stop()

	startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"))
	for v := 2; v >= 1; v-- {
		sameHashes(t, "read-only mount", hashesIn(t, versionDir(ro, v)), hashesOf(want[v]))
	}
	// The writer's cache holds the copy of version 2 (its files at their long paths).
	d = startMount(t, storeDir, rw)
	for v := 1; v <= 2; v++ {
		sameHashes(t, "writer mount after a remount", hashesIn(t, versionDir(rw, v)), hashesOf(want[v]))
	}
	d.stop()

	for v := 1; v <= 2; v++ {
		out := filepath.Join(work, "export", string(rune('0'+v)))
		mustCLI(t, "export", storeDir, string(rune('0'+v)), out)
		sameHashes(t, "export", hashesIn(t, out), hashesOf(want[v]))
	}
	// A commit's source deeper than PATH_MAX from /.
	src := filepath.Join(work, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	testfiles.WriteTree(t, src, want[1])
	mustCLI(t, "commit", storeDir, src)
	out := filepath.Join(work, "export", "3")
	mustCLI(t, "export", storeDir, "3", out)
	sameHashes(t, "commit and export", hashesIn(t, out), hashesOf(want[1]))
	verifyStore(t, storeDir)
}
