package gen

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

func TestWriteSeries(t *testing.T) {
	c := mustPreset(t, "tiny", 3e-6, 1)
	out := t.TempDir()
	var reports []VersionReport
	err := WriteSeries(SeriesOptions{Config: c, Out: out, Start: 1, Versions: 4, Done: true}, func(r VersionReport) error {
		reports = append(reports, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 4 {
		t.Fatalf("%d reports", len(reports))
	}
	for i, r := range reports {
		v := i + 1
		if r.Version != v || r.Dir != filepath.Join(out, VersionDirName(v)) {
			t.Errorf("report %d: %+v", i, r)
		}
		files := readDir(t, r.Dir)
		if done, ok := files["DONE"]; !ok || len(done) != 0 {
			t.Errorf("v%d: DONE missing or not empty", v)
		}
		delete(files, "DONE")
		var size int64
		for _, b := range files {
			size += int64(len(b))
		}
		if size != r.Bytes {
			t.Errorf("v%d: reported %d bytes, files hold %d", v, r.Bytes, size)
		}
		// Version v is the model after v-1 steps, whichever way it is produced.
		want, err := StreamCheckpointFiles(c, v-1)
		if err != nil {
			t.Fatal(err)
		}
		if filesDigest(files) != filesDigest(want) {
			t.Errorf("v%d differs from the streamed checkpoint after %d steps", v, v-1)
		}
	}
	if VersionDirName(4) != "weight_v000004" {
		t.Errorf("VersionDirName(4) = %s", VersionDirName(4))
	}

	// A series continued from version 3, streamed, gives the same bytes as the first run.
	out2 := t.TempDir()
	if err := WriteSeries(SeriesOptions{Config: c, Out: out2, Start: 3, Versions: 2, Stream: true}, nil); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{3, 4} {
		a := readDir(t, filepath.Join(out, VersionDirName(v)))
		delete(a, "DONE")
		b := readDir(t, filepath.Join(out2, VersionDirName(v)))
		if filesDigest(a) != filesDigest(b) {
			t.Errorf("v%d: continued streamed series differs", v)
		}
	}
	if _, err := os.Stat(filepath.Join(out2, VersionDirName(2))); !os.IsNotExist(err) {
		t.Errorf("v2 written by a series starting at 3: %v", err)
	}

	// In memory, starting at 3.
	out3 := t.TempDir()
	if err := WriteSeries(SeriesOptions{Config: c, Out: out3, Start: 3, Versions: 1}, nil); err != nil {
		t.Fatal(err)
	}
	a := readDir(t, filepath.Join(out, VersionDirName(3)))
	delete(a, "DONE")
	if filesDigest(a) != filesDigest(readDir(t, filepath.Join(out3, VersionDirName(3)))) {
		t.Error("v3 of an in-memory series starting at 3 differs")
	}
}

func TestWriteVersion(t *testing.T) {
	c := mustPreset(t, "tiny", 1e-6, 3)
	dir := t.TempDir()
	r, err := WriteVersion(c, 5, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	files := readDir(t, dir)
	if _, ok := files["DONE"]; !ok || r.Version != 5 || r.Dir != dir {
		t.Errorf("report %+v, files %d", r, len(files))
	}
	delete(files, "DONE")
	want, _ := StreamCheckpointFiles(c, 4)
	if !bytes.Equal(files["model.safetensors"], want["model.safetensors"]) {
		t.Error("version 5 is not the model after 4 steps")
	}
}

func TestSeriesErrors(t *testing.T) {
	c := mustPreset(t, "tiny", 1e-6, 1)
	bad := []SeriesOptions{
		{Config: c, Out: t.TempDir(), Start: 0, Versions: 1},
		{Config: c, Out: t.TempDir(), Start: 1, Versions: 0},
		{Config: c, Out: t.TempDir(), Start: MaxVersion, Versions: 2},
	}
	for _, o := range bad {
		if err := WriteSeries(o, nil); !errors.Is(err, ErrBadVersion) {
			t.Errorf("%+v: %v, want ErrBadVersion", o, err)
		}
	}
	for _, v := range []int{0, -1, MaxVersion + 1} {
		if _, err := WriteVersion(c, v, t.TempDir(), false); !errors.Is(err, ErrBadVersion) {
			t.Errorf("WriteVersion(%d): %v, want ErrBadVersion", v, err)
		}
	}
	noLR := c
	noLR.LR = 0
	if err := WriteSeries(SeriesOptions{Config: noLR, Out: t.TempDir(), Start: 1, Versions: 1}, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("lr 0: %v", err)
	}
	stop := errors.New("stop")
	calls := 0
	err := WriteSeries(SeriesOptions{Config: c, Out: t.TempDir(), Start: 1, Versions: 3}, func(VersionReport) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("report error: %v after %d calls", err, calls)
	}
	// Out is a regular file: creating the version directory fails.
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteSeries(SeriesOptions{Config: c, Out: file, Start: 1, Versions: 1, Done: true}, nil); err == nil {
		t.Error("series under a regular file succeeded")
	}
}
