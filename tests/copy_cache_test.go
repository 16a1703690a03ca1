package tests

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// End to end: the materialized copy is a checked cache, and a sealed
// version that can never be copied does not block later versions.

// flipFirstShardByte flips a byte in the middle of the first .safetensors file of a copy.
func flipFirstShardByte(t *testing.T, copyDir string) string {
	t.Helper()
	ents, err := os.ReadDir(copyDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			p := filepath.Join(copyDir, e.Name())
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x20
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return e.Name()
		}
	}
	t.Fatal("no safetensors file in the copy")
	return ""
}

// forgeFileSHA changes the first file SHA-256 in a manifest and recomputes the manifest's
// CRC-32C (docs/format.md §4): a version whose file can never match its hash.
func forgeFileSHA(t *testing.T, manifest string) {
	t.Helper()
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte(`"sha256":"`))
	if i < 0 {
		t.Fatal("no sha256 in the manifest")
	}
	i += len(`"sha256":"`)
	if b[i] == '0' {
		b[i] = '1'
	} else {
		b[i] = '0'
	}
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
	os.Chmod(manifest, 0o644)
	if err := os.WriteFile(manifest, b, 0o444); err != nil {
		t.Fatal(err)
	}
}

// TestMountCopyIsChecked flips a byte of the writer's copy of the latest version, then of a
// read-only mount's persistent copy: both mounts serve every version exactly.
func TestMountCopyIsChecked(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	want := genCheckpoints(t, work, 300_000, 2)
	for v := 1; v <= 2; v++ {
		mustCLI(t, "commit", storeDir, srcDir(work, v), "--version", []string{"", "1", "2"}[v])
	}
	flipFirstShardByte(t, filepath.Join(storeDir, "cache", "materialized"))
	rw := filepath.Join(work, "rw")
	os.Mkdir(rw, 0o755)
	d := startMount(t, storeDir, rw)
	for v := 2; v >= 1; v-- {
		sameHashes(t, "read-write mount over a damaged copy", sha256sumTree(t, versionDir(rw, v)), want[v])
	}
	d.stop()
	if !strings.Contains(d.out.String(), "chunk") {
		t.Errorf("the damage is not logged:\n%s", d.out.String())
	}

	ro, cache := filepath.Join(work, "ro"), filepath.Join(work, "ro-cache")
	os.Mkdir(ro, 0o755)
	d = startMount(t, storeDir, ro, "--read-only", "--cache-dir", cache)
	sameHashes(t, "read-only mount", sha256sumTree(t, versionDir(ro, 2)), want[2])
	d.stop()
	flipFirstShardByte(t, filepath.Join(cache, "materialized"))
	d = startMount(t, storeDir, ro, "--read-only", "--cache-dir", cache)
	for v := 2; v >= 1; v-- {
		sameHashes(t, "read-only mount restarted over a damaged copy", sha256sumTree(t, versionDir(ro, v)), want[v])
	}
	d.stop()
}

// TestBadVersionDoesNotBlockMount seals a version whose file SHA-256 matches nothing: commit,
// gc, and read-write and read-only mounts still work, and serve the later versions exactly.
func TestBadVersionDoesNotBlockMount(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	want := genCheckpoints(t, work, 300_000, 4)
	mustCLI(t, "commit", storeDir, srcDir(work, 1), "--version", "1")
	mustCLI(t, "commit", storeDir, srcDir(work, 2), "--version", "2")
	forgeFileSHA(t, filepath.Join(storeDir, "versions", "v000002"))
	os.RemoveAll(filepath.Join(storeDir, "cache"))
	mustCLI(t, "commit", storeDir, srcDir(work, 3), "--version", "3")
	mustCLI(t, "gc", storeDir, "--keep-last", "3")
	rw := filepath.Join(work, "rw")
	os.Mkdir(rw, 0o755)
	d := startMount(t, storeDir, rw)
	sameHashes(t, "v3 on the read-write mount", sha256sumTree(t, versionDir(rw, 3)), want[3])
	run(t, "cp", "-r", srcDir(work, 4), versionDir(rw, 4))
	run(t, "touch", filepath.Join(versionDir(rw, 4), "DONE"))
	sameHashes(t, "v4 written through the mount", sha256sumTree(t, versionDir(rw, 4)), want[4])
	d.stop()
	ro := filepath.Join(work, "ro")
	os.Mkdir(ro, 0o755)
	d = startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"))
	sameHashes(t, "v4 on a read-only mount", sha256sumTree(t, versionDir(ro, 4)), want[4])
	d.stop()
}

// TestMountSmallCacheDir starts a read-only mount whose --cache-dir is a file system too
// small for the copy (ENOSPC): it starts, warns, and serves every version from the objects.
func TestMountSmallCacheDir(t *testing.T) {
	skipWithoutFUSE(t)
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	want := genCheckpoints(t, work, 300_000, 2)
	mustCLI(t, "commit", storeDir, srcDir(work, 1), "--version", "1")
	mustCLI(t, "commit", storeDir, srcDir(work, 2), "--version", "2")
	cache := filepath.Join(work, "small")
	os.Mkdir(cache, 0o755)
	if err := syscall.Mount("tmpfs", cache, "tmpfs", 0, "size=256k"); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(cache, syscall.MNT_DETACH) })
	ro := filepath.Join(work, "ro")
	os.Mkdir(ro, 0o755)
	d := startMount(t, storeDir, ro, "--read-only", "--cache-dir", cache)
	for v := 2; v >= 1; v-- {
		sameHashes(t, "read-only mount on a small cache", sha256sumTree(t, versionDir(ro, v)), want[v])
	}
	d.stop()
	if !strings.Contains(d.out.String(), "cannot be copied") {
		t.Errorf("no warning about the copy:\n%s", d.out.String())
	}
}
