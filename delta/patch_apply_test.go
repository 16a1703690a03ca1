package delta

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var errCrash = errors.New("simulated crash")

func TestApplyPatch(t *testing.T) {
	base, result, order := threeFileVersions(t)
	_, p := buildTestPatch(t, 43, 42, base, result, order)
	const name = "model.safetensors"
	want := result[name]
	ref, err := applyPatchReference(p, base[name], name)
	if err != nil || !bytes.Equal(ref, want) {
		t.Fatalf("reference apply: %v", err)
	}
	// Chunk sizes that cut headers and elements in every way, on every path, against the
	// reference: in memory (WriteAt; sequential and parallel scan) and on a file (mapped).
	for _, chunk := range []int64{1, 3, 7, 8, 64, 4096, scanChunk} {
		for _, v := range applyVariants {
			t.Run(fmt.Sprintf("chunk%d/%s", chunk, v.name), func(t *testing.T) {
				target := v.open(t, base[name])
				j := &memJournal{}
				cfg := v.cfg
				cfg.chunk = chunk
				res, err := applyPatch(p, target, int64(len(base[name])), name, j, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(target.bytes(t), want) {
					t.Fatal("patched file differs from the result")
				}
				// embed: elements 0,1,2 adjacent (one write) + 40 + 90; up_proj 44; step 0; wide 1,2.
				wantWrites := 6
				switch v.method {
				case MethodMmap:
					wantWrites = 0
				case MethodPages:
					// One write per chunk that holds a change (the file is one page).
					wantWrites = res.Writes
					if res.Writes < 1 || res.Writes > 9 {
						t.Errorf("%d page writes for 9 elements", res.Writes)
					}
				}
				if res.ElementsWritten != 9 || res.Writes != wantWrites || res.Method != v.method || res.Hash != "xxh3-128" ||
					res.AlreadyApplied || res.Recovered || res.Synced {
					t.Errorf("result %+v, want 9 elements in %d writes by %s", res, wantWrites, v.method)
				}
				if j.ok {
					t.Error("journal left behind")
				}
				// Applying twice is harmless: detected by hash, nothing written.
				before := target.syncCount()
				res, err = applyPatch(p, target, int64(len(base[name])), name, j, cfg)
				if err != nil || !res.AlreadyApplied || res.Writes != 0 || res.Method != "" || target.syncCount() != before || !bytes.Equal(target.bytes(t), want) {
					t.Errorf("second apply: %+v, %v", res, err)
				}
			})
		}
	}
}

func TestApplyPatchRefusals(t *testing.T) {
	base, result, order := threeFileVersions(t)
	_, p := buildTestPatch(t, 43, 42, base, result, order)
	const name = "model.safetensors"
	model, h := patchTestModel(t, 1)
	tests := []struct {
		name   string
		file   []byte
		target string
		want   error
		msg    string
	}{
		{"other base", mutateElements(t, model, h, "model.mask", 3), name, ErrBaseMismatch, "neither the patch's base"},
		{"truncated", model[:len(model)-1], name, ErrBaseMismatch, "not the patch's base"},
		{"tiny", model[:5], name, ErrBaseMismatch, "too short"},
		{"marked without journal", append([]byte(applyMarker), model[8:]...), name, ErrBaseMismatch, "journal is missing"},
		{"file not in patch", model, "other.safetensors", ErrBaseMismatch, "changes no file"},
		{"whole file", model, "config.json", nil, "carried whole"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := &memTarget{b: bytes.Clone(tt.file)}
			j := &memJournal{}
			_, err := ApplyPatchWith(p, target, int64(len(target.b)), tt.target, j, ApplyOptions{})
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want %v containing %q", err, tt.want, tt.msg)
			}
			if !bytes.Equal(target.b, tt.file) || j.ok || target.syncs != 0 {
				t.Error("a refused apply touched the target or the journal")
			}
		})
	}
	// A tensor with another dtype in the target: refused before writing.
	tensors := []Tensor{}
	for _, tt := range h.Tensors {
		if tt.Name == "model.wide" {
			tt.DType = DTypeI64
		}
		tensors = append(tensors, tt)
	}
	hdr, err := EncodeHeader(h.Metadata, tensors)
	if err != nil {
		t.Fatal(err)
	}
	other := append(hdr, model[h.DataStart():]...)
	target := &memTarget{b: bytes.Clone(other)}
	if _, err := ApplyPatchWith(p, target, int64(len(other)), name, &memJournal{}, ApplyOptions{}); !errors.Is(err, ErrBaseMismatch) || !bytes.Equal(target.b, other) {
		t.Errorf("changed dtype: %v", err)
	}
}

// TestApplyCrashRecovery crashes an apply at every step, on every write path, and checks that
// the file never passes for either version while marked, and that running the same apply
// again finishes the job.
func TestApplyCrashRecovery(t *testing.T) {
	base, result, order := threeFileVersions(t)
	_, p := buildTestPatch(t, 43, 42, base, result, order)
	const name = "model.safetensors"
	steps := []struct {
		step   applyStep
		nth    int  // crash at the nth time the step is reached
		marked bool // the file is marked (neither version) after the crash
	}{
		{stepScanned, 1, false},
		{stepJournaled, 1, false},
		{stepMarked, 1, true},
		{stepWroteRun, 1, true},
		{stepWroteRun, 4, true},
		{stepWritten, 1, true},
		{stepRestored, 1, false},
	}
	for _, v := range applyVariants {
		for _, s := range steps {
			t.Run(fmt.Sprintf("%s/%s#%d", v.name, s.step, s.nth), func(t *testing.T) {
				target := v.open(t, base[name])
				size := int64(len(base[name]))
				j := &memJournal{}
				seen := 0
				cfg := v.cfg
				cfg.chunk = 5
				cfg.failpoint = func(step string) error {
					if step == string(s.step) {
						if seen++; seen == s.nth {
							return errCrash
						}
					}
					return nil
				}
				if _, err := applyPatch(p, target, size, name, j, cfg); !errors.Is(err, errCrash) {
					t.Fatalf("apply = %v, want the simulated crash", err)
				}
				checkCrashState(t, target.bytes(t), s.marked, base[name], result[name])
				// A different patch must not touch a file with a pending journal.
				if j.ok {
					_, other := buildTestPatch(t, 44, 43, result, base, order)
					if _, err := ApplyPatchWith(other, target, size, name, j, ApplyOptions{}); !errors.Is(err, ErrBaseMismatch) || !strings.Contains(err.Error(), "journal") {
						t.Errorf("other patch over a pending journal: %v", err)
					}
				}
				cfg.failpoint = nil
				res, err := applyPatch(p, target, size, name, j, cfg)
				if err != nil {
					t.Fatalf("re-run: %v", err)
				}
				if !bytes.Equal(target.bytes(t), result[name]) || j.ok {
					t.Fatal("re-run did not finish the apply")
				}
				if res.Recovered != (s.step != stepScanned) {
					t.Errorf("Recovered = %v", res.Recovered)
				}
			})
		}
	}
}

// checkCrashState checks a file after a crash: marked (refused by every safetensors reader,
// hashing as neither version) or exactly one of the versions.
func checkCrashState(t *testing.T, got []byte, marked bool, base, result []byte) {
	t.Helper()
	h := patchSHA(got)
	if marked {
		if string(got[:8]) != applyMarker {
			t.Errorf("first 8 bytes %q, want the marker", got[:8])
		}
		if _, err := ParseHeader(got, int64(len(got))); !errors.Is(err, ErrMalformed) {
			t.Errorf("a half-patched file parses as safetensors: %v", err)
		}
		if h == patchSHA(base) || h == patchSHA(result) {
			t.Error("a half-patched file hashes as a version")
		}
		return
	}
	if h != patchSHA(base) && h != patchSHA(result) {
		t.Error("an unmarked file after a crash is neither version")
	}
}

// TestApplyPatchFiles runs the apply on real files with the synced journal file of
// ApplyOptions.Sync, crashing once.
func TestApplyPatchFiles(t *testing.T) {
	base, result, order := threeFileVersions(t)
	_, p := buildTestPatch(t, 43, 42, base, result, order)
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(path, base["model.safetensors"], 0o644); err != nil {
		t.Fatal(err)
	}
	journal := fileJournal{path: path + ".apply-journal", sync: true}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := applyConfig{chunk: scanChunk, failpoint: func(step string) error {
		if step == string(stepWritten) {
			return errCrash
		}
		return nil
	}}
	if _, err := applyPatch(p, f, int64(len(base["model.safetensors"])), "model.safetensors", journal, cfg); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	if _, err := os.Stat(journal.path); err != nil {
		t.Fatalf("journal missing after the crash: %v", err)
	}
	res, err := ApplyPatchWith(p, f, int64(len(base["model.safetensors"])), "model.safetensors", journal, ApplyOptions{})
	if err != nil || !res.Recovered {
		t.Fatalf("re-run: %+v %v", res, err)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, result["model.safetensors"]) {
		t.Error("file differs from the result")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want the file alone", len(entries))
	}
}

func TestJournalErrors(t *testing.T) {
	base, result, order := threeFileVersions(t)
	_, p := buildTestPatch(t, 43, 42, base, result, order)
	target := &memTarget{b: bytes.Clone(base["model.safetensors"])}
	for _, rec := range []string{`not json`, `{"format":"x"}`, `{"format":"weightfs-apply-journal","version":2}`} {
		j := &memJournal{rec: []byte(rec), ok: true}
		if _, err := ApplyPatchWith(p, target, int64(len(target.b)), "model.safetensors", j, ApplyOptions{}); err == nil {
			t.Errorf("journal %s accepted", rec)
		}
	}
	if !bytes.Equal(target.b, base["model.safetensors"]) {
		t.Error("target touched")
	}
}

func TestApplyPatchFile(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 43, 42, base, result, order)
	dir := t.TempDir()
	patchPath := filepath.Join(dir, "weight_v000043.safetensors")
	os.WriteFile(patchPath, raw, 0o644)
	local := filepath.Join(dir, "local")
	os.Mkdir(local, 0o755)
	for _, n := range []string{"model.safetensors", "config.json"} {
		os.WriteFile(filepath.Join(local, n), base[n], 0o644)
	}
	for _, n := range []string{"model.safetensors", "config.json", "notes.txt"} {
		res, err := ApplyPatchFileWith(patchPath, filepath.Join(local, n), ApplyOptions{})
		if err != nil || res.AlreadyApplied {
			t.Fatalf("apply to %s: %+v %v", n, res, err)
		}
		if !strings.Contains(res.String(), "weight_v000042 -> weight_v000043") {
			t.Errorf("result line %q", res)
		}
		res, err = ApplyPatchFileWith(patchPath, filepath.Join(local, n), ApplyOptions{})
		if err != nil || !res.AlreadyApplied || !strings.Contains(res.String(), "already weight_v000043") {
			t.Errorf("second apply to %s: %v %v", n, res, err)
		}
	}
	for n, want := range map[string][]byte{"model.safetensors": result["model.safetensors"], "config.json": result["config.json"], "notes.txt": result["extra/notes.txt"]} {
		if got, _ := os.ReadFile(filepath.Join(local, n)); !bytes.Equal(got, want) {
			t.Errorf("%s differs from the result", n)
		}
	}
	if entries, _ := os.ReadDir(local); len(entries) != 3 {
		t.Errorf("%d entries left in the directory, want 3", len(entries))
	}
	os.WriteFile(filepath.Join(local, "config.json"), []byte("{}"), 0o644)
	if _, err := ApplyPatchFileWith(patchPath, filepath.Join(local, "config.json"), ApplyOptions{}); !errors.Is(err, ErrBaseMismatch) {
		t.Errorf("whole file over a wrong base: %v", err)
	}
}
