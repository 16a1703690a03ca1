package fs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindMount(t *testing.T) {
	info := `22 1 0:21 / / rw,relatime - ext4 /dev/sda1 rw
36 22 0:33 / /tmp/a\040b rw,nosuid shared:5 - tmpfs tmpfs rw
40 36 0:50 / /tmp/a\040b rw,nosuid,nodev - fuse.weightfs weightfs rw,user_id=0
`
	for _, tc := range []struct {
		mnt          string
		ok           bool
		fstype, from string
	}{
		{"/", true, "ext4", "/dev/sda1"},
		{"/tmp/a b", true, "fuse.weightfs", "weightfs"}, // the last one stacked wins
		{"/tmp/a", false, "", ""},
		{"/tmp/a\\040b", false, "", ""},
	} {
		e, ok := findMount(strings.NewReader(info), tc.mnt)
		if ok != tc.ok || (ok && (e.fstype != tc.fstype || e.source != tc.from)) {
			t.Errorf("findMount(%q) = %+v, %v; want %s %s, %v", tc.mnt, e, ok, tc.fstype, tc.from, tc.ok)
		}
	}
}

func TestCheckMountpointNotEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := checkMountpoint(dir, false); err != nil {
		t.Fatalf("empty dir: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := checkMountpoint(dir, false)
	if !errors.Is(err, ErrMountpointNotEmpty) || !strings.Contains(err.Error(), "--allow-non-empty") {
		t.Fatalf("non-empty dir: err = %v, want ErrMountpointNotEmpty naming --allow-non-empty", err)
	}
	if err := checkMountpoint(dir, true); err != nil {
		t.Fatalf("non-empty dir with allowNonEmpty: %v", err)
	}
}

func TestCheckUserAllowOther(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		conf string
		ok   bool
	}{
		{"user_allow_other\n", true},
		{"# comment\n  user_allow_other  \nmount_max = 10\n", true},
		{"#user_allow_other\n", false},
		{"", false},
	} {
		p := filepath.Join(dir, "fuse.conf")
		if err := os.WriteFile(p, []byte(tc.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		err := checkUserAllowOther(p)
		if (err == nil) != tc.ok {
			t.Errorf("conf %q: err = %v, want ok=%v", tc.conf, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrAllowOtherForbidden) || !strings.Contains(err.Error(), "add the line `user_allow_other`")) {
			t.Errorf("conf %q: message %q does not say what to change", tc.conf, err)
		}
	}
	if err := checkUserAllowOther(filepath.Join(dir, "missing")); !errors.Is(err, ErrAllowOtherForbidden) {
		t.Errorf("missing conf: err = %v", err)
	}
}
