//go:build linux

package delta

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Links and ownership around an apply (docs/format.md Part III §3, Names beside the file). Whatever is planted at the names
// an apply uses beside its target (a symbolic or hard link to a victim file, a stale
// temporary), the victim keeps its bytes; the apply either succeeds and leaves a regular
// file, or refuses and names the path. The target keeps its mode and owner on both paths,
// and a target that is itself a symbolic link is refused.

// linkTestSetup writes the base files of threeFileVersions and their patch into a new
// directory, beside a victim file.
func linkTestSetup(t *testing.T) (dir, patchPath, victim string, base, result map[string][]byte) {
	t.Helper()
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 43, 42, base, result, order)
	dir = t.TempDir()
	patchPath = filepath.Join(dir, "patch.safetensors")
	victim = filepath.Join(dir, "victim")
	for path, b := range map[string][]byte{patchPath: raw, victim: []byte("precious\n"),
		filepath.Join(dir, "model.safetensors"): base["model.safetensors"], filepath.Join(dir, "config.json"): base["config.json"]} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, patchPath, victim, base, result
}

func TestApplyPlantedLinks(t *testing.T) {
	const (
		symlink  = "symlink"
		hardlink = "hard link"
		stale    = "stale file"
	)
	tests := []struct {
		file, suffix, plant string
		refused             bool // else the apply must succeed
	}{
		// The temporary names: whatever is there is a leftover and is removed, not opened.
		{"model.safetensors", JournalSuffix + ".tmp", symlink, false},
		{"model.safetensors", JournalSuffix + ".tmp", hardlink, false},
		{"model.safetensors", JournalSuffix + ".tmp", stale, false},
		{"config.json", ".weightfs-tmp", symlink, false},
		{"config.json", ".weightfs-tmp", hardlink, false},
		{"config.json", ".weightfs-tmp", stale, false},
		// The lock file and the journal hold state: a link there is refused.
		{"model.safetensors", LockSuffix, symlink, true},
		{"model.safetensors", LockSuffix, hardlink, true},
		{"config.json", LockSuffix, symlink, true},
		{"model.safetensors", JournalSuffix, symlink, true},
	}
	for _, tt := range tests {
		t.Run(tt.file+tt.suffix+"/"+tt.plant, func(t *testing.T) {
			dir, patchPath, victim, base, result := linkTestSetup(t)
			target := filepath.Join(dir, tt.file)
			planted := target + tt.suffix
			var err error
			switch tt.plant {
			case symlink:
				err = os.Symlink(victim, planted)
			case hardlink:
				err = os.Link(victim, planted)
			case stale:
				err = os.WriteFile(planted, []byte("left by a crash"), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = ApplyPatchFileWith(patchPath, target, ApplyOptions{})
			if got, _ := os.ReadFile(victim); !bytes.Equal(got, []byte("precious\n")) {
				t.Fatalf("the victim was written through %s: %q (apply: %v)", planted, got, err)
			}
			if fi, lerr := os.Lstat(target); lerr != nil || !fi.Mode().IsRegular() {
				t.Fatalf("%s is no longer a regular file: %v %v", tt.file, fi, lerr)
			}
			got, _ := os.ReadFile(target)
			if tt.refused {
				if err == nil || !strings.Contains(err.Error(), planted) {
					t.Fatalf("apply with a %s at %s: %v, want a refusal naming it", tt.plant, planted, err)
				}
				if !bytes.Equal(got, base[tt.file]) {
					t.Error("the refused apply changed the target")
				}
				return
			}
			if err != nil {
				t.Fatalf("apply with a %s at %s: %v", tt.plant, planted, err)
			}
			if !bytes.Equal(got, result[tt.file]) {
				t.Error("the target is not the result")
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 4 {
				t.Errorf("%d entries in the directory, want the patch, the victim and the two files", len(entries))
			}
		})
	}
}

// TestApplyKeepsModeAndOwner applies in place (model.safetensors) and by replacing the whole
// file (config.json) to files of mode 0600 owned, when the test runs as root, by 65534.
func TestApplyKeepsModeAndOwner(t *testing.T) {
	for _, file := range []string{"model.safetensors", "config.json"} {
		for _, opts := range []ApplyOptions{{}, {Sync: true}} {
			t.Run(fmt.Sprintf("%s/sync=%v", file, opts.Sync), func(t *testing.T) {
				dir, patchPath, _, _, result := linkTestSetup(t)
				target := filepath.Join(dir, file)
				if err := os.Chmod(target, 0o600); err != nil {
					t.Fatal(err)
				}
				uid, gid := os.Getuid(), os.Getgid()
				if os.Geteuid() == 0 {
					uid, gid = 65534, 65534
					if err := os.Chown(target, uid, gid); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := ApplyPatchFileWith(patchPath, target, opts); err != nil {
					t.Fatal(err)
				}
				if got, _ := os.ReadFile(target); !bytes.Equal(got, result[file]) {
					t.Fatal("the target is not the result")
				}
				fi, err := os.Lstat(target)
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if fi.Mode() != 0o600 || int(st.Uid) != uid || int(st.Gid) != gid {
					t.Errorf("after the apply: mode %v owner %d:%d, want -rw------- %d:%d", fi.Mode(), st.Uid, st.Gid, uid, gid)
				}
			})
		}
	}
}

// TestApplyRefusesSymlinkedTarget: a target that is a symbolic link is refused, with a
// message that names where it points; neither the link nor the file it points to changes.
func TestApplyRefusesSymlinkedTarget(t *testing.T) {
	for _, file := range []string{"model.safetensors", "config.json"} {
		t.Run(file, func(t *testing.T) {
			dir, patchPath, _, base, _ := linkTestSetup(t)
			real := filepath.Join(dir, file)
			link := filepath.Join(t.TempDir(), file)
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			_, err := ApplyPatchFileWith(patchPath, link, ApplyOptions{})
			if err == nil || !strings.Contains(err.Error(), "symbolic link") || !strings.Contains(err.Error(), real) {
				t.Fatalf("apply to a symbolic link: %v, want a refusal naming where it points", err)
			}
			if got, _ := os.ReadFile(real); !bytes.Equal(got, base[file]) {
				t.Error("the file behind the link changed")
			}
			if dest, err := os.Readlink(link); err != nil || dest != real {
				t.Errorf("the link changed: %q %v", dest, err)
			}
			if entries, _ := os.ReadDir(filepath.Dir(link)); len(entries) != 1 {
				t.Errorf("%d entries beside the link, want it alone", len(entries))
			}
		})
	}
}
