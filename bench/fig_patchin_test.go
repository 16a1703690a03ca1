package main

import (
	"encoding/json"
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
	out := `{"mode": "patch", "torch": true, "wall_s": 5.08, "trainer_cpu_s": 0.68, "trainer_wchar": 15520000,
		"bytes_saved": 15500000, "daemon_cpu_s": 1.49, "daemon_cpu_idle_s": 1.49, "checkpoint_bytes": 208300000,
		"split": {"prepare_s": 1.5, "write_s": 0.11, "seal_s": 3.46}}`
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.WallS != 5.08 || r.TrainerWchar != 15520000 || r.Split["seal_s"] != 3.46 || !r.Torch {
		t.Fatalf("decoded %+v", r)
	}
}
