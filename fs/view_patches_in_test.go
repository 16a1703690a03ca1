package fs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/store"
)

// patchBetween is the patch from base to result (file name -> bytes; every file of result).
func patchBetween(t *testing.T, v, baseV uint64, base, result map[string][]byte) []byte {
	t.Helper()
	var srcs []delta.PatchSource
	for name, r := range result {
		src := delta.PatchSource{Name: name, Result: bytes.NewReader(r), ResultSize: int64(len(r))}
		if b, ok := base[name]; ok {
			src.Base, src.BaseSize = bytes.NewReader(b), int64(len(b))
		}
		srcs = append(srcs, src)
	}
	var buf bytes.Buffer
	if _, err := delta.BuildPatchWith(&bufferAt{&buf}, v, baseV, srcs, delta.PatchBuildOptions{Shapes: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestPatchIn: on a read-write mount, cp of a patch into patches/ seals the version it makes
// (its files read back with the SHA-256 of the checkpoint the patch was made from); a patch
// written as NAME.tmp and renamed into place does the same (by xxh3-128 alone); a bad patch
// (a stale base, a wrong result_xxh3) fails cp with EINVAL, seals nothing and leaves its
// reason in NAME.rejected.
func TestPatchIn(t *testing.T) {
	st := newEmptyStore(t)
	w, n := pattern(1, 8192), pattern(2, 64)
	model := func() []byte {
		return viewSafetensors(t, viewTensor{"w", []int64{4096}, w}, viewTensor{"norm", []int64{32}, n})
	}
	v1 := map[string][]byte{"model.safetensors": model(), "config.json": []byte(`{"step": 1}`)}
	dir := t.TempDir()
	for p, b := range v1 {
		writeFile(t, filepath.Join(dir, p), b)
	}
	if _, err := st.Commit(dir, store.CommitOptions{Version: 1}); err != nil {
		t.Fatal(err)
	}
	w[100] ^= 1
	w[5001] ^= 0x80
	v2 := map[string][]byte{"model.safetensors": model(), "config.json": []byte(`{"step": 2}`)}
	n[3] ^= 4
	v3 := map[string][]byte{"model.safetensors": model(), "config.json": []byte(`{"step": 2}`)}

	mnt, _ := mountTest(t, FromStore(st), Options{})
	patches := filepath.Join(mnt, "patches")
	src := filepath.Join(t.TempDir(), "p2")
	writeFile(t, src, patchBetween(t, 2, 1, v1, v2))
	if out, err := exec.Command("cp", src, filepath.Join(patches, PatchName(2))).CombinedOutput(); err != nil {
		t.Fatalf("cp of a patch into patches/: %v: %s", err, out)
	}
	checkVersion := func(v uint64, files map[string][]byte) {
		t.Helper()
		for p, b := range files {
			got, err := os.ReadFile(filepath.Join(mnt, VersionName(v), p))
			if err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(got) != sha256.Sum256(b) {
				t.Fatalf("%s of %s: SHA-256 %x, the checkpoint's is %x", p, VersionName(v), sha256.Sum256(got), sha256.Sum256(b))
			}
		}
	}
	checkVersion(2, v2)
	if _, err := os.Stat(filepath.Join(patches, PatchName(2))); err != nil {
		t.Fatalf("the sealed version's patch: %v", err)
	}

	// A patch from version 1 when 2 is the latest: cp fails, nothing is sealed, the note says why.
	bad := filepath.Join(t.TempDir(), "p3")
	writeFile(t, bad, patchBetween(t, 3, 1, v1, v3))
	out, err := exec.Command("cp", bad, filepath.Join(patches, PatchName(3))).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Invalid argument") {
		t.Fatalf("cp of a patch from a base that is not the latest: %v: %s", err, out)
	}
	t.Logf("cp says: %s", out)
	note, err := os.ReadFile(filepath.Join(patches, PatchName(3)+rejectedSuffix))
	if err != nil || !strings.Contains(string(note), "base_version is 1, the latest version is 2") {
		t.Fatalf("the note of the refused patch: %v: %s", err, note)
	}
	_, err = os.Stat(filepath.Join(patches, PatchName(3)))
	wantErrno(t, "stat the refused patch", err, syscall.ENOENT)
	_, err = os.Stat(filepath.Join(mnt, VersionName(3)))
	wantErrno(t, "stat the version of the refused patch", err, syscall.ENOENT)
	if latest, _ := st.Latest(); latest != 2 {
		t.Fatalf("latest %d after a refused patch", latest)
	}
	// A patch whose result_xxh3 is wrong (its SHA-256 right) is refused the same way.
	good3 := patchBetween(t, 3, 2, v2, v3)
	gp, err := delta.OpenPatch(bytes.NewReader(good3), int64(len(good3)))
	if err != nil {
		t.Fatal(err)
	}
	mf, _ := gp.File("model.safetensors")
	x := []byte(hex.EncodeToString(mf.ResultXXH3[:]))
	other := byte('0') // another lowercase hex digit: a wrong digest, not a malformed one
	if x[0] == '0' {
		other = '1'
	}
	forged := bytes.Replace(good3, x, append([]byte{other}, x[1:]...), 1)
	writeFile(t, bad, forged)
	if out, err := exec.Command("cp", bad, filepath.Join(patches, PatchName(3))).CombinedOutput(); err == nil || !strings.Contains(string(out), "Invalid argument") {
		t.Fatalf("cp of a patch with a wrong result_xxh3: %v: %s", err, out)
	}
	if note, err := os.ReadFile(filepath.Join(patches, PatchName(3)+rejectedSuffix)); err != nil || !strings.Contains(string(note), "result_xxh3") {
		t.Fatalf("the note of the patch with a wrong result_xxh3: %v: %s", err, note)
	}
	if latest, _ := st.Latest(); latest != 2 {
		t.Fatalf("latest %d after a refused patch", latest)
	}

	// Written as NAME.tmp, fsynced and renamed into place (os.replace): seals at the rename,
	// and the note of the refusal goes. This one names its files by xxh3-128 alone, as the
	// Python writer does (docs/format.md Part III §2).
	tmp := filepath.Join(patches, PatchName(3)+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	plan := gp.Plan
	plan.Files = append([]delta.PatchFile(nil), plan.Files...)
	for i := range plan.Files {
		plan.Files[i].XXH3Only, plan.Files[i].BaseSHA256, plan.Files[i].ResultSHA256 = true, [32]byte{}, [32]byte{}
	}
	hdr, _, err := delta.EncodePatchHeader(plan)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(append(hdr, good3[gp.Header.DataStart():]...)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(patches, PatchName(3))); err != nil {
		t.Fatalf("rename a patch into place: %v", err)
	}
	checkVersion(3, v3)
	if got := listDir(t, patches); strings.Contains(got, rejectedSuffix) || strings.Contains(got, ".tmp") {
		t.Fatalf("patches/ after the seal: %s", got)
	}
	// The version's patch is now the store's render of it, which applies to v2's file.
	p3, err := os.ReadFile(filepath.Join(patches, PatchName(3)))
	if err != nil {
		t.Fatal(err)
	}
	pp, err := delta.OpenPatch(bytes.NewReader(p3), int64(len(p3)))
	if err != nil || pp.Plan.ModelVersion != 3 || pp.Plan.BaseVersion != 2 {
		t.Fatalf("patch of the sealed version: %v %+v", err, pp)
	}
	want := sha256.Sum256(v3["model.safetensors"])
	if f, _ := pp.File("model.safetensors"); f.ResultSHA256 != want {
		t.Fatalf("served patch's result %s", hex.EncodeToString(f.ResultSHA256[:]))
	}
	// Names that are no patch are refused as before.
	wantErrno(t, "create patches/x", os.WriteFile(filepath.Join(patches, "x"), nil, 0o644), syscall.EPERM)
	wantErrno(t, "create an existing version's patch", os.WriteFile(filepath.Join(patches, PatchName(2)), []byte("x"), 0o644), syscall.EPERM)
}
