package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// flipByte flips one byte of a file in the middle of it (a read-only object too).
func flipByte(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x20
	os.Chmod(p, 0o600)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// stepFiles is a small checkpoint at a training step: a tensor that changes a little and a
// file unique to the step.
func stepFiles(t *testing.T, step byte) map[string][]byte {
	return map[string][]byte{
		"model.safetensors": safetensorsFile(t, bf16Tensor("w", 4096, step)),
		"step.txt":          []byte{'0' + step},
	}
}

func versionNumbers(infos []VersionInfo) []uint64 {
	var out []uint64
	for _, v := range infos {
		out = append(out, v.Number)
	}
	return out
}

func sameNumbers(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// One flipped byte in the latest manifest used to make every open for writing, every commit
// and gc fail. The damaged version is skipped with a log line naming it
// and the repair command; latest is the newest readable version; a new version is numbered
// above the damaged one; reads of the damaged one name it and the command; Repair moves it to
// quarantine/, and its number is never used again.
func TestDamagedManifestSkippedAndQuarantined(t *testing.T) {
	s, root := newStore(t, Options{})
	for step := byte(1); step <= 3; step++ {
		commitTree(t, s, 0, stepFiles(t, step))
	}
	closeStore(t, s)
	flipByte(t, filepath.Join(root, "versions", "v000003"))

	log := &logLines{t: t}
	s = openStore(t, root, Options{Logger: logtest.New(log.logf)})
	if !log.has("version 3", "weightfs verify --repair") {
		t.Errorf("no log line names version 3 and the repair command: %q", log.lines)
	}
	if v, ok := s.Latest(); !ok || v != 2 {
		t.Fatalf("latest %d, want the newest readable version, 2", v)
	}
	if got := versionNumbers(s.Versions()); !sameNumbers(got, []uint64{1, 2}) {
		t.Fatalf("versions %v, want [1 2]", got)
	}
	for v := uint64(1); v <= 2; v++ {
		mustEqualBytes(t, "step.txt", readWhole(t, s, v, "step.txt"), stepFiles(t, byte(v))["step.txt"])
	}
	if _, err := s.OpenFile(3, "step.txt"); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "version 3") ||
		!strings.Contains(err.Error(), "weightfs verify --repair") {
		t.Fatalf("open of a file of the damaged version: %v", err)
	}
	if _, err := s.NewVersion(3); !errors.Is(err, ErrVersionNotAbove) {
		t.Fatalf("new version 3 over the damaged version 3: %v", err)
	}
	info, _ := commitTree(t, s, 0, stepFiles(t, 4))
	if info.Number != 4 || info.PreviousNumber != 2 {
		t.Fatalf("commit after the damage: version %d after %d, want 4 after 2", info.Number, info.PreviousNumber)
	}
	sameTree(t, "export of version 4", exportHashes(t, s, 4), treeHashes(t, writeTree(t, t.TempDir(), stepFiles(t, 4))))
	if _, err := s.GC(10); err != nil {
		t.Fatalf("gc with a damaged manifest: %v", err)
	}
	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, Logger: logtest.New(t.Logf)})
	if got := versionNumbers(r.Versions()); !sameNumbers(got, []uint64{1, 2, 4}) {
		t.Fatalf("a reader's versions %v, want [1 2 4]", got)
	}

	rep, err := s.RepairWith(RepairOptions{})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	if !sameNumbers(rep.Quarantined, []uint64{3}) || len(rep.QuarantinedObjects) != 0 {
		t.Fatalf("repair quarantined versions %v and objects %v, want version 3", rep.Quarantined, rep.QuarantinedObjects)
	}
	if _, err := os.Stat(filepath.Join(root, "versions", "v000003")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the damaged manifest is still in versions/: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "quarantine", "v000003")); err != nil {
		t.Fatalf("the damaged manifest is not in quarantine/: %v", err)
	}
	if _, err := s.Verify(nil); err != nil {
		t.Fatalf("verify after the repair: %v", err)
	}
	closeStore(t, s)
	s = openStore(t, root, Options{})
	if got := versionNumbers(s.Versions()); !sameNumbers(got, []uint64{1, 2, 4}) {
		t.Fatalf("versions after the repair %v, want [1 2 4]", got)
	}
	for v := uint64(1); v <= 4; v += 1 + v/2 { // 1, 2, 4
		sameTree(t, "export", exportHashes(t, s, v), treeHashes(t, writeTree(t, t.TempDir(), stepFiles(t, byte(v)))))
	}

	// A quarantined number is not used again, even when it was the newest.
	flipByte(t, filepath.Join(root, "versions", "v000004"))
	expectDamage(s)
	closeStore(t, s)
	s = openStore(t, root, Options{})
	if rep, err := s.RepairWith(RepairOptions{}); err != nil || !sameNumbers(rep.Quarantined, []uint64{4}) {
		t.Fatalf("repair of version 4: %v %v", rep.Quarantined, err)
	}
	closeStore(t, s)
	s = openStore(t, root, Options{})
	if info, _ := commitTree(t, s, 0, stepFiles(t, 5)); info.Number != 5 {
		t.Fatalf("commit after quarantining version 4: version %d, want 5", info.Number)
	}
}

// A version whose objects are damaged is quarantined with them: later versions that used it
// as their previous stay readable where their own objects allow, and a damaged object is
// moved aside so that the next commit of the same bytes stores them anew.
func TestRepairQuarantinesDamagedObjects(t *testing.T) {
	s, root := newLooseStore(t, Options{})
	for step := byte(1); step <= 3; step++ {
		commitTree(t, s, 0, stepFiles(t, step))
	}
	ver, err := s.versions.sealedVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	bad := ver.files["step.txt"].ID // only version 2 has it
	flipByte(t, filepath.Join(root, "objects", bad.String()[:2], bad.String()))
	expectDamage(s)
	closeStore(t, s)
	s = openLoose(t, root, Options{})
	rep, err := s.RepairWith(RepairOptions{})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	if !sameNumbers(rep.Quarantined, []uint64{2}) || len(rep.QuarantinedObjects) != 1 || rep.QuarantinedObjects[0] != bad {
		t.Fatalf("repair quarantined versions %v and objects %v, want version 2 and object %s", rep.Quarantined, rep.QuarantinedObjects, bad)
	}
	if _, err := os.Stat(filepath.Join(root, "quarantine", "objects", bad.String())); err != nil {
		t.Fatalf("the damaged object is not in quarantine/objects/: %v", err)
	}
	for _, v := range []uint64{1, 3} {
		sameTree(t, "export", exportHashes(t, s, v), treeHashes(t, writeTree(t, t.TempDir(), stepFiles(t, byte(v)))))
	}
	info, _ := commitTree(t, s, 0, stepFiles(t, 2))
	sameTree(t, "export", exportHashes(t, s, info.Number), treeHashes(t, writeTree(t, t.TempDir(), stepFiles(t, 2))))
	if _, err := s.Verify(nil); err != nil {
		t.Fatalf("verify after the repair: %v", err)
	}
}

// The writer refuses at the seal a manifest that readers would refuse: a version of ~7M
// tensors used to seal and then be unreadable.
func TestSealRefusesManifestReadersRefuse(t *testing.T) {
	s, _ := newStore(t, Options{})
	s.ingest.manifestLimit = 300
	files := map[string][]byte{}
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		files[name+".txt"] = []byte(name)
	}
	_, err := s.Commit(writeTree(t, t.TempDir(), files), CommitOptions{})
	if !errors.Is(err, ErrManifestTooLarge) {
		t.Fatalf("commit of a version whose manifest exceeds the readers' limit: %v", err)
	}
	if len(s.Versions()) != 0 {
		t.Fatalf("versions %v after the refused seal", versionNumbers(s.Versions()))
	}
	s.ingest.manifestLimit = maxManifestLen
	commitTree(t, s, 0, files)
}
