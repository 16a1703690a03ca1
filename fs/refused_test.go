package fs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// refusedNote reads the reason a seal of dir was refused, as a trainer would without the
// daemon's log: DIR/.refused. ok is false when there is none.
func refusedNote(t *testing.T, dir string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, RefusedName))
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatalf("read %s/%s: %v", dir, RefusedName, err)
	}
	return string(data), true
}

// TestRefusedSealSaysWhy: every refused seal (an empty version, a store failure, a number
// that is not above the newest, through DONE or a rename) answers an errno whose message fits
// (mv does not say "cannot move to a subdirectory of itself"), and leaves the reason and what
// to do in DIR/.refused, the directory that was to be sealed, readable through the mount
// and never stored; a successful seal leaves none, and rm -rf removes a refused version.
func TestRefusedSealSaysWhy(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	v := func(n int) string { return filepath.Join(mnt, VersionName(uint64(n))) }

	// An empty version: ENODATA, with the reason.
	if err := os.Mkdir(v(2), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := refusedNote(t, v(2)); ok {
		t.Errorf("an open version never sealed has a refusal note")
	}
	wantErrno(t, "seal an empty version", seal(v(2)), syscall.ENODATA)
	if note, ok := refusedNote(t, v(2)); !ok || !strings.Contains(note, "no files") || !strings.Contains(note, "ENODATA") {
		t.Errorf("note after the empty seal: %q, %v", note, ok)
	}
	if got := listDir(t, v(2)); got != ".refused DONE" {
		t.Errorf("the refused version lists %q", got)
	}

	// A store failure: its errno, with the reason; the next seal succeeds and the note goes.
	writeFile(t, filepath.Join(v(2), "a"), []byte("weights"))
	b.mu.Lock()
	b.sealErr = errors.New("write object: disk on fire")
	b.mu.Unlock()
	wantErrno(t, "seal with a failing store", seal(v(2)), syscall.EIO)
	if note, ok := refusedNote(t, v(2)); !ok || !strings.Contains(note, "disk on fire") {
		t.Errorf("note after the failed seal: %q, %v", note, ok)
	}
	mustSeal(t, v(2))
	if note, ok := refusedNote(t, v(2)); ok {
		t.Errorf("the sealed version still has a refusal note: %q", note)
	}
	if got := listDir(t, v(2)); got != "a" {
		t.Errorf("the sealed version lists %q", got)
	}
	if _, ok := b.file(2, RefusedName); ok {
		t.Errorf("the note was stored")
	}

	// A staging directory renamed below the latest: EPERM (mv: "Operation not permitted"),
	// and the staging directory says why.
	stage := filepath.Join(mnt, "stage")
	if err := os.Mkdir(stage, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(stage, "f"), []byte("x"))
	out, err := exec.Command("mv", stage, v(1)).CombinedOutput()
	if err == nil || strings.Contains(string(out), "subdirectory of itself") || !strings.Contains(string(out), "Operation not permitted") {
		t.Errorf("mv stage below the latest: %v: %s (want EPERM, \"Operation not permitted\")", err, out)
	}
	wantErrno(t, "rename stage below the latest", os.Rename(stage, v(1)), syscall.EPERM)
	if note, ok := refusedNote(t, stage); !ok || !strings.Contains(note, "not above the newest version 2") {
		t.Errorf("note of the staging directory: %q, %v", note, ok)
	}
	// A version refused for a write that failed goes with rm -rf, note and all.
	if err := os.Mkdir(v(4), 0o755); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, "seal another empty version", seal(v(4)), syscall.ENODATA)
	if out, err := exec.Command("rm", "-rf", v(4)).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf a refused version: %v: %s", err, out)
	}
	if err := os.Rename(stage, v(3)); err != nil {
		t.Fatalf("rename stage above the latest: %v", err)
	}
	if got, _ := b.file(3, "f"); string(got) != "x" {
		t.Errorf("stored f = %q", got)
	}
}

// TestUnmountLogsDroppedVersion: an open version never sealed is dropped at unmount, as the
// contract says; the log says so (WARN) with its name and files.
func TestUnmountLogsDroppedVersion(t *testing.T) {
	canMount(t)
	b := newFakeStore()
	mnt := t.TempDir()
	lg := &testLog{t: t}
	defer lg.stop()
	srv, err := MountVersionStore(b, mnt, Options{StagingDir: t.TempDir(), Logger: logtest.New(lg.logf)})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	unmounted := false
	defer func() {
		if !unmounted {
			_ = srv.Unmount()
		}
	}()
	ver := filepath.Join(mnt, VersionName(4))
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ver, "model.safetensors"), pattern(1, 5000))
	writeFile(t, filepath.Join(ver, "sub", "config.json"), []byte("{}"))
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	unmounted = true
	found := false
	for _, l := range lg.logged() {
		found = found || (strings.HasPrefix(l, "WARN") && strings.Contains(l, "weight_v000004") &&
			strings.Contains(l, "model.safetensors") && strings.Contains(l, "sub/config.json") && strings.Contains(l, "files=2"))
	}
	if !found {
		t.Errorf("no WARN line names the dropped open version and its files:\n%s", strings.Join(lg.logged(), "\n"))
	}
}
