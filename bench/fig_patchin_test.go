package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestPatchinDriverKeys checks that every key the embedded driver prints is a field of
// patchinRun and that every field is printed: a renamed key would read as 0 silently.
func TestPatchinDriverKeys(t *testing.T) {
	src := string(patchinDriver)
	typ := reflect.TypeOf(patchinRun{})
	for i := range typ.NumField() {
		key := strings.Split(typ.Field(i).Tag.Get("json"), ",")[0]
		if !strings.Contains(src, `"`+key+`":`) {
			t.Errorf("the driver prints no %q (field %s)", key, typ.Field(i).Name)
		}
	}
	var r patchinRun
	out := `{"mode": "patch", "torch": true, "version": 3, "wall_s": 5.08, "trainer_cpu_s": 0.68, "trainer_wchar": 15520000,
		"bytes_saved": 15500000, "daemon_cpu_s": 1.49, "daemon_cpu_idle_s": 1.49, "checkpoint_bytes": 208300000,
		"split": {"prepare_s": 1.5, "write_s": 0.11, "seal_s": 3.46}}`
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.WallS != 5.08 || r.TrainerWchar != 15520000 || r.Split["seal_s"] != 3.46 || !r.Torch || r.Version != 3 {
		t.Fatalf("decoded %+v", r)
	}
}

// TestPatchinSplitKeys checks that every key of the split the figure reads is written by the
// driver or by the writer's timings (writer.py's prepare, patch_out.py's write_patch): a key
// renamed on one side would read as 0 and move the split's seconds silently.
func TestPatchinSplitKeys(t *testing.T) {
	pkg, err := pythonPackageDir()
	if err != nil {
		t.Fatal(err)
	}
	src := string(patchinDriver)
	for _, f := range []string{"writer.py", "patch_out.py"} {
		b, err := os.ReadFile(filepath.Join(pkg, "weightfs", f))
		if err != nil {
			t.Fatal(err)
		}
		src += string(b)
	}
	for _, k := range patchinSplitKeys {
		if !strings.Contains(src, `"`+k+`"`) && !strings.Contains(src, k+"=") {
			t.Errorf("neither the driver nor the writer writes the split's %q", k)
		}
	}
}

// TestSaveWithoutDiff: the save's wall less the diff and the hashes' wait after it, plus the
// hashes' own time.
func TestSaveWithoutDiff(t *testing.T) {
	r := &patchinRun{WallS: 1.5, Split: map[string]float64{"prepare_s": 0.4, "diff_s": 0.3, "hash_wait_s": 0.05,
		"hash_s": 0.12, "encode_s": 0.04, "write_s": 0.03, "seal_s": 0.9, "commit_s": 0.01}}
	if got, want := saveWithoutDiff(r), 1.5-0.3-0.05+0.12; got != want {
		t.Fatalf("saveWithoutDiff = %v, want %v", got, want)
	}
}
