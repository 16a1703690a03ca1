package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyFormatFileOlderThanObjects puts the format file of format 1 (valid, its CRC right)
// over a store of format 2 that holds version-2 delta sections (a format file restored from an
// old backup): a program that reads only format 1 would open it and take those sections for
// damage (its `verify --repair` would quarantine good objects). Verify must report the format
// file (and not the objects: they are intact); reads stay right.
func TestVerifyFormatFileOlderThanObjects(t *testing.T) {
	root := copyFixture(t, fixtureV2)
	if err := os.WriteFile(filepath.Join(root, formatFileName), encodeFormatVersion(1), 0o600); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
	expectDamage(r)
	rep, err := r.Verify(nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), formatFileName) {
		t.Fatalf("verify of a store of format 1 with version-2 sections: %v, want damage naming %s", err, formatFileName)
	}
	for _, d := range rep.Damaged {
		if !d.Object.IsZero() {
			t.Errorf("an intact object is reported: %v", d)
		}
	}
}

// TestRepairFormatFileOlderThanObjects: `verify --repair` opens the store as its writer, which
// rewrites the format file of format 1 as format 2 before Repair's Verify runs: nothing is
// moved into the quarantine, and the store verifies afterwards.
func TestRepairFormatFileOlderThanObjects(t *testing.T) {
	root := copyFixture(t, fixtureV2)
	formatPath := filepath.Join(root, formatFileName)
	if err := os.WriteFile(formatPath, encodeFormatVersion(1), 0o600); err != nil {
		t.Fatal(err)
	}
	w := openStore(t, root, Options{FileCopyBytes: -1})
	rep, err := w.RepairWith(RepairOptions{})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	if len(rep.Verify.Damaged) != 0 || len(rep.Moved) != 0 || len(rep.Lost) != 0 {
		t.Fatalf("repair found %v, moved %v, lost %v: want nothing", rep.Verify.Damaged, rep.Moved, rep.Lost)
	}
	got, err := os.ReadFile(formatPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := encodeFormatVersion(storeFormatVersion); string(got) != string(want) {
		t.Fatalf("format file after repair % x, want % x", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "quarantine")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("quarantine after repair: %v, want none", err)
	}
	if err := closeStore(t, w); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir(), FileCopyBytes: -1})
	if _, err := r.Verify(nil); err != nil {
		t.Fatalf("verify after repair: %v", err)
	}
}

// TestRepairFormatFileNotUpgraded: a writer that did not rewrite the format file at open (as
// a rank of a writer group does not) meets the finding in Repair: it moves nothing (the
// objects are intact, and there is no object to move) and says why.
func TestRepairFormatFileNotUpgraded(t *testing.T) {
	root := copyFixture(t, fixtureV2)
	w := openStore(t, root, Options{FileCopyBytes: -1})
	w.format = 1 // what the writer would hold had it not upgraded the file of format 1
	expectDamage(w)
	rep, err := w.RepairWith(RepairOptions{})
	if err == nil || !strings.Contains(err.Error(), formatFileName) || !strings.Contains(err.Error(), "nothing moved") {
		t.Fatalf("repair of a store whose format file is older than its objects: %v, want a refusal naming %s", err, formatFileName)
	}
	if len(rep.Moved) != 0 || len(rep.Quarantined) != 0 || len(rep.QuarantinedObjects) != 0 {
		t.Fatalf("repair moved %v", rep.Moved)
	}
	if _, err := os.Stat(filepath.Join(root, "quarantine")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("quarantine after repair: %v, want none", err)
	}
}
