package tests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMountViewsKeepModes: with --allow-other, patches/ and deltas/ are no way around the
// modes of the files they are made from. A patch or a delta file made from a version (or its
// base) that holds a file other users may not read is not readable by them either (its mode
// is the most restrictive of its sources'); one made from files every user may read is
// readable by every user. Read as nobody (setpriv).
func TestMountViewsKeepModes(t *testing.T) {
	work, storeDir := deployStore(t) // v1: hello.txt
	genCheckpoints(t, work, 2_000_000, 4)
	commit := func(v int, secret string, private ...string) {
		src := srcDir(work, v)
		if secret != "" {
			if err := os.WriteFile(filepath.Join(src, "secret.json"), []byte(secret), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range private {
			if err := os.Chmod(filepath.Join(src, name), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mustCLI(t, "commit", storeDir, src)
	}
	const shard = "model-00001-of-00002.safetensors"
	commit(1, "")                            // v2: every file 0644
	commit(2, "")                            // v3: every file 0644, a patch and a delta from v2
	commit(3, `{"token": "hunter2"}`)        // v4: secret.json 0600, carried whole in v4's patch
	commit(4, `{"token": "hunter2"}`, shard) // v5: the same secret.json, a shard 0600: a delta
	mnt := mkMountpoint(t, work, "shared")
	startMount(t, storeDir, mnt, "--read-only", "--allow-other", "--cache-dir", filepath.Join(work, "cache"))

	readable := func(p string) (bool, string) {
		out, err := asNobody("cat", p)
		if err != nil && !strings.Contains(out, "Permission denied") {
			t.Fatalf("nobody reads %s: %v: %.200s", p, err, out)
		}
		return err == nil, out
	}
	check := func(p string, wantReadable bool) {
		t.Helper()
		st, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat %s as root: %v", p, err)
		}
		got, out := readable(p)
		switch {
		case got && !wantReadable:
			t.Errorf("nobody read %s (mode %v, %d bytes) made from a file nobody may read", p, st.Mode().Perm(), len(out))
		case !got && wantReadable:
			t.Errorf("nobody may not read %s (mode %v), made from files every user may read", p, st.Mode().Perm())
		}
		if others := st.Mode().Perm()&0o004 != 0; others != wantReadable {
			t.Errorf("%s: mode %v, others may read: %v, want %v", p, st.Mode().Perm(), others, wantReadable)
		}
	}
	// The versions themselves: secret.json is nobody's.
	if ok, _ := readable(filepath.Join(mnt, "weight_v000004", "secret.json")); ok {
		t.Fatalf("nobody read weight_v000004/secret.json (0600)")
	}
	check(filepath.Join(mnt, "patches", "weight_v000003.safetensors"), true)
	check(filepath.Join(mnt, "patches", "weight_v000004.safetensors"), false)
	check(filepath.Join(mnt, "patches", "weight_v000005.safetensors"), false)
	check(filepath.Join(mnt, "patches", "weight_v000005.from_v000003.safetensors"), false)
	for _, v := range []string{"weight_v000003", "weight_v000005"} {
		dir := filepath.Join(mnt, "deltas", v)
		ents, err := os.ReadDir(dir)
		if err != nil || len(ents) < 2 {
			t.Fatalf("list %s: %d entries, %v (want a delta: index and shards)", dir, len(ents), err)
		}
		for _, e := range ents {
			check(filepath.Join(dir, e.Name()), v == "weight_v000003")
		}
	}
	// v4 added secret.json: its delta is the full checkpoint, served with the version's modes.
	check(filepath.Join(mnt, "deltas", "weight_v000004", "secret.json"), false)
	check(filepath.Join(mnt, "deltas", "weight_v000004", "config.json"), true)
}
