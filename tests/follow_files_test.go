package tests

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// The follower's directory file by file: modes, files a version drops, files changed behind
// its back (issue 27, items 6, 10, 12).

func bf16Model(t *testing.T, shape []int64, fill byte) []byte {
	t.Helper()
	tensors := []delta.Tensor{{Name: "w", DType: delta.DTypeBF16, Shape: shape}}
	hdr, err := delta.EncodeHeader(nil, tensors)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, tensors[0].End)
	for i := range data {
		data[i] = byte(i) ^ fill
	}
	return append(hdr, data...)
}

// sealFiles seals version v through the read-write mount rw from files (slash paths) and
// returns their hashes.
func sealFiles(t *testing.T, work, rw string, v int, files map[string]versionFile) map[string]string {
	t.Helper()
	src := filepath.Join(work, fmt.Sprintf("src%d", v))
	for name, f := range files {
		p := filepath.Join(src, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	want := treeHashes(t, src)
	sealVersion(t, rw, v, src)
	return want
}

// fileModes maps every regular file under dir (slash paths, less weightfs's own) to its
// permission bits.
func fileModes(t *testing.T, dir string) map[string]os.FileMode {
	t.Helper()
	m := map[string]os.FileMode{}
	for name := range followedHashes(t, dir) {
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		m[name] = fi.Mode().Perm()
	}
	return m
}

// sameModes fails the test unless dir's files have the modes of the version directory src,
// and the names in private are 0600 there.
func sameModes(t *testing.T, what, dir, src string, private ...string) {
	t.Helper()
	got, want := fileModes(t, dir), fileModes(t, src)
	for _, name := range private {
		if want[name] != 0o600 {
			t.Fatalf("%s: %s is %#o in the version, not 0600: the test needs the mount to keep modes", what, name, want[name])
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: modes %v, the version's are %v", what, got, want)
	}
}

// TestFollowKeepsModes (issue 27, item 6): the followed directory's files have the version's
// modes, as `weightfs export` gives them: a 0600 file stays 0600 after a full copy and after a
// patch, also one the patch creates.
func TestFollowKeepsModes(t *testing.T) {
	work, _, rw, _, _ := followMounts(t)
	dir := filepath.Join(work, "follow")
	sealFiles(t, work, rw, 1, map[string]versionFile{
		"model.safetensors": {bf16Model(t, []int64{64, 64}, 0), 0o644},
		"secret.json":       {[]byte(`{"token": 1}`), 0o600},
		"sub/key.bin":       {[]byte("key 1"), 0o600},
	})
	f := startFollower(t, rw, dir)
	waitDirVersion(t, dir, 1, f)
	sameModes(t, "version 1 (a full copy)", dir, versionDir(rw, 1), "secret.json", "sub/key.bin")
	want := sealFiles(t, work, rw, 2, map[string]versionFile{
		"model.safetensors": {bf16Model(t, []int64{64, 64}, 1), 0o644},
		"secret.json":       {[]byte(`{"token": 2}`), 0o600},
		"sub/key.bin":       {[]byte("key 1"), 0o600},
		"new-secret.json":   {[]byte(`{"new": 2}`), 0o600}, // created by the patch
	})
	waitDirVersion(t, dir, 2, f)
	sameHashes(t, "version 2", followedHashes(t, dir), want)
	sameModes(t, "version 2 (a patch)", dir, versionDir(rw, 2), "secret.json", "new-secret.json")
	if out := f.out.String(); !strings.Contains(out, "version 1 -> 2") {
		t.Errorf("version 2 was not reached by a patch:\n%s", out)
	}
}

// TestFollowRemovesDroppedFiles (issue 27, item 10): a file the next version no longer has
// leaves the followed directory, whether the follower gets there by a patch (version 2 drops
// extra.txt and the only file of sub/) or by a full copy (version 3 changes the tensor
// layout and drops config.json), so that the directory equals the version; a file weightfs
// never put there (the user's notes.txt) stays.
func TestFollowRemovesDroppedFiles(t *testing.T) {
	work, _, rw, _, _ := followMounts(t)
	dir := filepath.Join(work, "follow")
	want := sealFiles(t, work, rw, 1, map[string]versionFile{
		"model.safetensors": {bf16Model(t, []int64{64, 64}, 0), 0o644},
		"config.json":       {[]byte(`{"v": 1}`), 0o644},
		"extra.txt":         {[]byte("dropped at 2"), 0o644},
		"sub/dropped.bin":   {[]byte("dropped at 2"), 0o644},
	})
	f := startFollower(t, rw, dir)
	waitDirVersion(t, dir, 1, f)
	sameHashes(t, "version 1", followedHashes(t, dir), want)
	notes := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("the user's"), 0o644); err != nil {
		t.Fatal(err)
	}
	withNotes := func(m map[string]string) map[string]string {
		m["notes.txt"] = fmt.Sprintf("%x", sha256.Sum256([]byte("the user's")))
		return m
	}
	want = sealFiles(t, work, rw, 2, map[string]versionFile{
		"model.safetensors": {bf16Model(t, []int64{64, 64}, 1), 0o644},
		"config.json":       {[]byte(`{"v": 2}`), 0o644},
	})
	waitDirVersion(t, dir, 2, f)
	sameHashes(t, "version 2 (by a patch)", followedHashes(t, dir), withNotes(want))
	if _, err := os.Stat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("sub/, emptied by version 2, is still there (%v)", err)
	}
	want = sealFiles(t, work, rw, 3, map[string]versionFile{
		"model.safetensors": {bf16Model(t, []int64{32, 128}, 3), 0o644}, // no patch from 2
	})
	waitDirVersion(t, dir, 3, f)
	sameHashes(t, "version 3 (by a full copy)", followedHashes(t, dir), withNotes(want))
	out := f.out.String()
	if !strings.Contains(out, "version 1 -> 2") || strings.Count(out, "copied whole") != 2 {
		t.Errorf("want version 2 by a patch and 3 by a full copy:\n%s", out)
	}
}

// waitFileHash waits (generously) until path hashes to want.
func waitFileHash(t *testing.T, path, want string, f *follower) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for {
		got, err := fileSHA256(path)
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not put back (sha256 %s, %v):\n%s", path, got, err, f.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFollowRepairsChangedFiles (issue 27, item 12): a file of the followed directory that
// something else changed (written with its size and modification time kept, or removed) is
// copied again from the version, while the follower waits for a new one and when the patch to
// the next version does not name it; a second follower of the directory is refused, naming
// the first.
func TestFollowRepairsChangedFiles(t *testing.T) {
	work, _, rw, _, _ := followMounts(t)
	dir := filepath.Join(work, "follow")
	tokenizer := []byte(`{"vocab": ["a", "b"]}`) // the same in every version: no patch names it
	want := sealFiles(t, work, rw, 1, map[string]versionFile{
		"model.safetensors": {bf16Model(t, []int64{64, 64}, 0), 0o644},
		"tokenizer.json":    {tokenizer, 0o644},
		"config.json":       {[]byte(`{"v": 1}`), 0o644},
	})
	f := startFollower(t, rw, dir)
	waitDirVersion(t, dir, 1, f)

	second := runCLI(t, "follow", "--once", rw, dir)
	if second.code == 0 || !strings.Contains(second.stderr, "locked") || !strings.Contains(second.stderr, fmt.Sprint(f.cmd.Process.Pid)) {
		t.Errorf("a second follower of the directory: exit %d, stderr %s; want a refusal naming process %d",
			second.code, second.stderr, f.cmd.Process.Pid)
	}

	// Tampered with while the follower waits: same size, modification time put back.
	tok := filepath.Join(dir, "tokenizer.json")
	fi, err := os.Stat(tok)
	if err != nil {
		t.Fatal(err)
	}
	forged := []byte(strings.Replace(string(tokenizer), `"a"`, `"X"`, 1))
	if err := os.WriteFile(tok, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tok, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	waitFileHash(t, tok, want["tokenizer.json"], f)
	if err := os.Remove(filepath.Join(dir, "config.json")); err != nil {
		t.Fatal(err)
	}
	waitFileHash(t, filepath.Join(dir, "config.json"), want["config.json"], f)

	// Tampered with while no follower runs, then a version arrives whose patch does not name
	// the file: the next follower puts it back before it patches.
	f.kill9()
	if err := os.WriteFile(tok, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	want = sealFiles(t, work, rw, 2, map[string]versionFile{
		"model.safetensors": {bf16Model(t, []int64{64, 64}, 1), 0o644},
		"tokenizer.json":    {tokenizer, 0o644},
		"config.json":       {[]byte(`{"v": 2}`), 0o644},
	})
	r := mustCLI(t, "follow", "--once", rw, dir)
	sameHashes(t, "version 2", followedHashes(t, dir), want)
	out := f.out.String() + r.stderr
	if strings.Count(out, "copied whole") != 1 || !strings.Contains(out, "version 1 -> 2") ||
		strings.Count(out, "tokenizer.json is not version 1's") != 2 || !strings.Contains(out, "config.json is not version 1's (it is missing)") {
		t.Errorf("want one full copy (version 1), the rest by a patch and single files:\n%s", out)
	}
	if testing.Verbose() {
		t.Logf("the second follower said: %s\nthe followers said:\n%s", second.stderr, out)
	}
}
