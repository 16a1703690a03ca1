package delta

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestApplyPatchDir applies a patch to a checkpoint directory: every named file (a sparse
// safetensors file, a changed blob, a new file in a new subdirectory) becomes the result,
// files the patch does not name are untouched, and the state file records the version. A
// re-run is a no-op success; a directory recording another version is refused before anything
// is written; an apply interrupted between files (state pending, one file done) is finished by
// running it again.
func TestApplyPatchDir(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 8, 7, base, result, order)
	patchPath := filepath.Join(t.TempDir(), "patch.safetensors")
	if err := os.WriteFile(patchPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	fill := func(t *testing.T) string {
		dir := t.TempDir()
		for name, b := range base {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "mine.txt"), []byte("not in the patch"), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	check := func(t *testing.T, dir string) {
		t.Helper()
		for name, want := range result {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes (%v), not the result", name, len(got), err)
			}
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "mine.txt")); string(got) != "not in the patch" {
			t.Errorf("a file the patch does not name was changed: %q", got)
		}
		st, ok, err := ReadDirState(dir)
		if err != nil || !ok || st.Version != 8 || st.Pending != 0 {
			t.Errorf("state %+v, %v, %v; want version 8", st, ok, err)
		}
	}

	t.Run("fresh", func(t *testing.T) {
		dir := fill(t)
		res, err := ApplyPatchDir(patchPath, dir, ApplyOptions{})
		if err != nil || len(res.Files) != 3 {
			t.Fatalf("apply: %+v, %v", res, err)
		}
		check(t, dir)
		raw, _ := os.ReadFile(filepath.Join(dir, StateDir, StateFile))
		if want := `{"format":"weightfs-dir-state","format_version":1,"version":8}` + "\n"; string(raw) != want {
			t.Errorf("state file %q, want %q", raw, want)
		}
		res, err = ApplyPatchDir(patchPath, dir, ApplyOptions{})
		if err != nil || !res.AlreadyApplied {
			t.Fatalf("re-run: %+v, %v; want a no-op", res, err)
		}
		check(t, dir)
	})

	t.Run("another version is refused", func(t *testing.T) {
		dir := fill(t)
		if err := WriteDirState(dir, DirState{Version: 6}); err != nil {
			t.Fatal(err)
		}
		if _, err := ApplyPatchDir(patchPath, dir, ApplyOptions{}); !errors.Is(err, ErrBaseMismatch) {
			t.Fatalf("apply to a directory at version 6: %v, want ErrBaseMismatch", err)
		}
		for name, want := range base {
			if got, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(got, want) {
				t.Errorf("refused apply changed %s", name)
			}
		}
		if err := WriteDirState(dir, DirState{Version: 7, Pending: 9}); err != nil {
			t.Fatal(err)
		}
		if _, err := ApplyPatchDir(patchPath, dir, ApplyOptions{}); !errors.Is(err, ErrBaseMismatch) {
			t.Fatalf("apply to a directory part-way to version 9: %v, want ErrBaseMismatch", err)
		}
	})

	t.Run("interrupted between files", func(t *testing.T) {
		dir := fill(t)
		if err := WriteDirState(dir, DirState{Version: 7, Pending: 8}); err != nil {
			t.Fatal(err)
		}
		if _, err := ApplyPatchFileWith(patchPath, filepath.Join(dir, "model.safetensors"), ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
		res, err := ApplyPatchDir(patchPath, dir, ApplyOptions{})
		if err != nil {
			t.Fatalf("finish: %v", err)
		}
		already := 0
		for _, f := range res.Files {
			if f.AlreadyApplied {
				already++
			}
		}
		if already != 1 {
			t.Errorf("%d files already applied, want 1: %+v", already, res.Files)
		}
		check(t, dir)
	})

	t.Run("a name outside the directory is refused", func(t *testing.T) {
		evil := map[string][]byte{"../escape.txt": []byte("x")}
		raw, _ := buildTestPatch(t, 8, 7, map[string][]byte{}, evil, []string{"../escape.txt"})
		p := filepath.Join(t.TempDir(), "evil.safetensors")
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "d")
		os.Mkdir(dir, 0o755)
		if _, err := ApplyPatchDir(p, dir, ApplyOptions{}); !errors.Is(err, ErrMalformed) {
			t.Fatalf("apply of a patch naming ../escape.txt: %v, want ErrMalformed", err)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape.txt")); err == nil {
			t.Error("the patch wrote outside the directory")
		}
	})
}

// TestApplyPatchDirRefusalKeepsState: an apply whose base check fails before it writes
// anything leaves the directory's state as it found it (none, or its version), so that the
// right patch is accepted afterwards (issue 27, item 9: a refused apply recorded
// {"version":7,"pending":8} and every later patch was refused).
func TestApplyPatchDirRefusalKeepsState(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 8, 7, base, result, order)
	patchPath := filepath.Join(t.TempDir(), "patch.safetensors")
	if err := os.WriteFile(patchPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		state *DirState // nil: no state file
	}{
		{"unmarked", nil},
		{"marked at the base", &DirState{Version: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, b := range base {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// config.json, the first file of the patch, holds neither the base nor the result.
			if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"step": 0}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.state != nil {
				if err := WriteDirState(dir, *tc.state); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.ReadFile(filepath.Join(dir, StateDir, StateFile))
			if _, err := ApplyPatchDir(patchPath, dir, ApplyOptions{}); !errors.Is(err, ErrBaseMismatch) {
				t.Fatalf("apply to a directory whose config.json is another version: %v, want ErrBaseMismatch", err)
			}
			after, _ := os.ReadFile(filepath.Join(dir, StateDir, StateFile))
			if !bytes.Equal(before, after) {
				t.Fatalf("the refused apply changed the state from %q to %q", before, after)
			}
			// Once the file is the base, the same patch applies.
			if err := os.WriteFile(filepath.Join(dir, "config.json"), base["config.json"], 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := ApplyPatchDir(patchPath, dir, ApplyOptions{}); err != nil {
				t.Fatalf("apply after the refusal: %v", err)
			}
			for name, want := range result {
				if got, _ := os.ReadFile(filepath.Join(dir, name)); !bytes.Equal(got, want) {
					t.Errorf("%s is not the result", name)
				}
			}
		})
	}
}

// TestDirStateFiles: the record of the files weightfs put in a directory. An apply of a
// directory that records its files keeps the record, with the files the patch names as the
// apply left them; a recorded path outside the directory is refused when the state is read;
// a removal never goes through a symbolic link planted in place of a directory.
func TestDirStateFiles(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 8, 7, base, result, order)
	patchPath := filepath.Join(t.TempDir(), "patch.safetensors")
	if err := os.WriteFile(patchPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var rec []DirFile
	for name, b := range base {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := StatDirFile(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		rec = append(rec, f)
	}
	if err := WriteDirState(dir, DirState{Version: 7, Files: rec}); err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyPatchDir(patchPath, dir, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	st, _, err := ReadDirState(dir)
	if err != nil || st.Version != 8 {
		t.Fatalf("state %+v, %v", st, err)
	}
	var paths []string
	for _, f := range st.Files {
		paths = append(paths, f.Path)
		now, err := StatDirFile(dir, f.Path)
		if why := f.Changed(now, err); why != "" {
			t.Errorf("%s: the record does not describe it: %s", f.Path, why)
		}
	}
	if got, want := fmt.Sprint(paths), "[config.json extra/notes.txt model.safetensors tokenizer.json]"; got != want {
		t.Errorf("recorded files %s, want %s", got, want)
	}
	// A write that keeps the size and the modification time is still seen (ctime), once the
	// file system's clock has moved past the record (the record cannot see a change within
	// the same tick of the clock: docs/format.md Part III §3).
	f := st.Files[0]
	p := filepath.Join(dir, f.Path)
	for probe := filepath.Join(t.TempDir(), "probe"); ; {
		os.WriteFile(probe, nil, 0o644)
		if now, err := StatDirFile(filepath.Dir(probe), "probe"); err != nil || now.Ctime > f.Ctime {
			break
		}
	}
	fi, _ := os.Stat(p)
	b, _ := os.ReadFile(p)
	b[0] ^= 1
	os.WriteFile(p, b, 0o644)
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	if now, err := StatDirFile(dir, f.Path); f.Changed(now, err) == "" {
		t.Errorf("a rewrite of %s with its mtime put back is not seen", f.Path)
	}

	for _, bad := range []string{"../escape", "/etc/passwd", ".weightfs/lock"} {
		if err := WriteDirState(dir, DirState{Version: 8, Files: []DirFile{{Path: bad}}}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadDirState(dir); !errors.Is(err, ErrMalformed) {
			t.Errorf("a state recording %q: %v, want ErrMalformed", bad, err)
		}
	}
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := RemoveDirFile(dir, "sub/victim"); err == nil {
		t.Error("a removal through a symbolic link was not refused")
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("the file the link leads to was removed: %v", err)
	}
}
