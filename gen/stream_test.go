package gen

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestStreamMatchesModel: the streaming writer replays each range from its seeds and must
// give the in-memory Model's bytes exactly, for every file, sharded or not, at any step.
func TestStreamMatchesModel(t *testing.T) {
	for _, shards := range []int{1, 4} {
		c := mustPreset(t, "small", 3e-6, 21)
		c.Shards = shards
		m, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		for steps := 0; steps <= 3; steps++ {
			if steps > 0 {
				m.Step()
			}
			want, err := m.CheckpointFiles()
			if err != nil {
				t.Fatal(err)
			}
			for _, workers := range []int{1, 3} {
				sc := c
				sc.Workers = workers
				got, err := StreamCheckpointFiles(sc, steps)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("shards %d steps %d: %d files, want %d", shards, steps, len(got), len(want))
				}
				for name, b := range want {
					if !bytes.Equal(got[name], b) {
						t.Errorf("shards %d steps %d workers %d: %s differs", shards, steps, workers, name)
					}
				}
			}
		}
	}
}

// TestStreamMatchesModelAcrossBuffers covers a file of several write buffers, where ranges
// are clipped at buffer boundaries.
func TestStreamMatchesModelAcrossBuffers(t *testing.T) {
	c := ConfigForParams(5_000_000, 3e-6, 8)
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	m.Step()
	want, err := m.CheckpointFiles()
	if err != nil {
		t.Fatal(err)
	}
	if len(want["model.safetensors"]) <= 2*writeBufBytes {
		t.Fatalf("file of %d bytes does not span several buffers", len(want["model.safetensors"]))
	}
	got, err := StreamCheckpointFiles(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	if filesDigest(got) != filesDigest(want) {
		t.Error("streamed checkpoint differs")
	}
}

// TestStreamToDisk writes a streamed checkpoint into a directory and compares it with the
// Model's files written there.
func TestStreamToDisk(t *testing.T) {
	c := mustPreset(t, "small", 1e-6, 2)
	c.Shards = 2
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	m.Step()
	m.Step()
	modelDir, streamDir := t.TempDir(), filepath.Join(t.TempDir(), "new", "dir")
	if err := m.WriteCheckpoint(modelDir); err != nil {
		t.Fatal(err)
	}
	if err := StreamCheckpoint(c, 2, streamDir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		a, _ := os.ReadFile(filepath.Join(modelDir, e.Name()))
		b, err := os.ReadFile(filepath.Join(streamDir, e.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s: streamed file differs (%v)", e.Name(), err)
		}
	}
	want := []string{"config.json", "generation_config.json", "model-00001-of-00002.safetensors",
		"model-00002-of-00002.safetensors", "model.safetensors.index.json"}
	if len(names) != len(want) {
		t.Fatalf("files %v, want %v", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Errorf("files %v, want %v", names, want)
		}
	}
}

func TestStreamBadSteps(t *testing.T) {
	c := mustPreset(t, "tiny", 1e-6, 1)
	if err := StreamCheckpoint(c, -1, t.TempDir()); !errors.Is(err, ErrBadVersion) {
		t.Errorf("steps -1: %v", err)
	}
	if _, err := StreamCheckpointFiles(c, MaxVersion); !errors.Is(err, ErrBadVersion) {
		t.Errorf("steps MaxVersion: %v", err)
	}
}

func TestWriteCheckpointErrors(t *testing.T) {
	m, err := New(mustPreset(t, "tiny", 1e-6, 1))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.WriteCheckpoint(file); err == nil {
		t.Error("writing into a regular file succeeded")
	}
	if err := m.WriteCheckpoint(filepath.Join(file, "sub")); err == nil {
		t.Error("writing under a regular file succeeded")
	}
}

// TestStreamMemoryIsBounded: streaming allocates its write buffers and per-worker scratch, not
// the model: far less than the 12 bytes per parameter of an in-memory Model, or even the 2
// bytes per parameter of the checkpoint it writes.
func TestStreamMemoryIsBounded(t *testing.T) {
	c := ConfigForParams(10_000_000, 1e-6, 1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := StreamCheckpoint(c, 1, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	const limit = 2*writeBufBytes + 4<<20
	if allocated > limit || uint64(2*c.ParamCount()) < limit {
		t.Errorf("streaming %d parameters allocated %d bytes, want at most %d", c.ParamCount(), allocated, limit)
	}
}
