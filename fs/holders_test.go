package fs

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestScanHolders reads a /proc made of plain files and links: working directories, open
// descriptors and mapped files under the mount point are reported, one process a line, and
// the rest (the mount point's parent, a sibling with a common prefix) is not.
func TestScanHolders(t *testing.T) {
	proc := t.TempDir()
	const mnt = "/data/mnt"
	mk := func(pid, comm string, links map[string]string, maps string) {
		dir := filepath.Join(proc, pid)
		if err := os.MkdirAll(filepath.Join(dir, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, target := range links {
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644)
	}
	mk("12", "python3", map[string]string{"cwd": "/data/mnt/weight_v000003", "root": "/", "fd/0": "/dev/null",
		"fd/7": "/data/mnt/weight_v000003/model.safetensors"},
		"7f00-7f10 r--s 00000000 00:2a 5 /data/mnt/weight_v000003/model.safetensors\n"+
			"7f10-7f20 r--s 00001000 00:2a 5 /data/mnt/weight_v000003/model.safetensors\n"+
			"7f20-7f30 r-xp 00000000 08:01 9 /usr/lib/libc.so.6\n")
	mk("3", "bash", map[string]string{"cwd": "/data/mnt"}, "")
	mk("40", "other", map[string]string{"cwd": "/data/mnt2", "fd/1": "/data"}, "")
	mk("self", "x", map[string]string{"cwd": "/data/mnt"}, "")
	got := scanHolders(proc, mnt)
	want := []string{
		"pid 3 (bash): cwd .",
		"pid 12 (python3): cwd weight_v000003, fd 7 weight_v000003/model.safetensors, mapped weight_v000003/model.safetensors",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("scanHolders:\n got %q\nwant %q", got, want)
	}
}
