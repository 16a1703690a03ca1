package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// TestCLIVerifyFormatFileOlderThanObjects: the format file of format 1 restored over the
// store of format 2 (store/testdata/v2, which holds version-2 delta sections): `verify` fails
// with one finding, the format file (no object, no version: the objects are intact), and
// `verify --repair` rewrites the file as format 2, moves nothing and exits 0; `verify` then
// passes.
func TestCLIVerifyFormatFileOlderThanObjects(t *testing.T) {
	storeDir := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(storeDir, os.DirFS("../store/testdata/v2")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"objects", "versions", "tmp", "cache"} {
		if err := os.MkdirAll(filepath.Join(storeDir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	formatPath := filepath.Join(storeDir, store.FormatFileName)
	// docs/format.md Part I §2: the format file of format 1.
	format1 := []byte{0x57, 0x46, 0x53, 0x53, 0x54, 0x4f, 0x52, 0x45, 0x01, 0x00, 0x00, 0x00, 0xee, 0xe6, 0x1f, 0x2a}
	if err := os.WriteFile(formatPath, format1, 0o600); err != nil {
		t.Fatal(err)
	}

	tr, jr := runCLI(t, "verify", storeDir), runCLI(t, "verify", "--json", storeDir)
	if tr.code != 1 || jr.code != 1 {
		t.Fatalf("verify: exit %d (text), %d (json), want 1\n%s%s", tr.code, jr.code, tr.stdout, tr.stderr)
	}
	var vf verifyOut
	decodeJSON(t, "verify --json", jr.stdout, &vf)
	if vf.OK || len(vf.Damaged) != 1 {
		t.Fatalf("verify --json: %+v, want one finding", vf)
	}
	d := vf.Damaged[0]
	if d.Path != store.FormatFileName || d.Object != "" || d.Version != 0 || !strings.HasPrefix(d.Text, store.FormatFileName+": store format 1") {
		t.Errorf("finding %+v, want the format file alone", d)
	}
	if !strings.HasPrefix(tr.stdout, "DAMAGED "+d.Text+"\n") {
		t.Errorf("verify text:\n%s\nwant DAMAGED %s", tr.stdout, d.Text)
	}

	rr := runCLI(t, "verify", "--repair", storeDir)
	if rr.code != 0 || strings.Contains(rr.stdout, "QUARANTINED") || !strings.Contains(rr.stderr, "store format upgraded from 1 to 3") {
		t.Fatalf("verify --repair: exit %d\nstdout: %s\nstderr: %s", rr.code, rr.stdout, rr.stderr)
	}
	if got, err := os.ReadFile(formatPath); err != nil || !bytes.Equal(got, store.FormatFile()) {
		t.Fatalf("format file after repair: % x (%v), want % x", got, err, store.FormatFile())
	}
	if _, err := os.Stat(filepath.Join(storeDir, "quarantine")); !os.IsNotExist(err) {
		t.Errorf("quarantine after repair: %v, want none", err)
	}
	mustCLI(t, "verify", storeDir)
}
