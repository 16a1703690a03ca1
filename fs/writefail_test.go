package fs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tinyDisk mounts a tmpfs of size bytes at a fresh directory (skipped when not root;
// as root a failed mount fails the test) and unmounts it when the test ends.
func tinyDisk(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("mount a tmpfs (root only): %v", err)
		}
		t.Fatalf("mount a tmpfs as root: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fillTo writes a file into dir until only room bytes (rounded to pages) are free, and
// returns its path.
func fillTo(t *testing.T, dir string, room int64) string {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	p := filepath.Join(dir, "filler")
	if err := os.WriteFile(p, make([]byte, free-room), 0o600); err != nil {
		t.Fatalf("fill %s: %v", dir, err)
	}
	return p
}

// TestSealAfterFailedWrite: a write into an open version that fails (here: the staging
// disk is full) leaves the file without the bytes the writer meant it to hold, so no seal
// may store it as it is: closing DONE fails with EIO and says which file and what to do,
// until the file's failed bytes are written again (on the same descriptor, or by rewriting
// the file) or the file is removed. The sealed version then holds exactly what was written.
func TestSealAfterFailedWrite(t *testing.T) {
	b := newFakeStore()
	staging := tinyDisk(t, 4<<20)
	mnt, _ := mountTest(t, b, Options{StagingDir: staging})
	lg, _ := mountLogs.Load(mnt)
	data := pattern(7, 1<<20)
	other := []byte("tokenizer")

	tests := []struct {
		name string
		room int64 // bytes left free on the staging disk for the write that fails
		// mend runs once the disk has room again; want is what the version must then hold
		// as w (nil: no w).
		mend func(t *testing.T, f *os.File, p string)
		want []byte
	}{
		{"the failed write retried on its descriptor", 256 << 10, func(t *testing.T, f *os.File, p string) {
			if _, err := f.WriteAt(data, 0); err != nil {
				t.Fatalf("write again: %v", err)
			}
		}, data},
		{"the file rewritten", 256 << 10, func(t *testing.T, f *os.File, p string) {
			if err := os.WriteFile(p, data[:1000], 0o644); err != nil {
				t.Fatalf("rewrite: %v", err)
			}
		}, data[:1000]},
		{"the file rewritten after nothing was written", 0, func(t *testing.T, f *os.File, p string) {
			if err := os.WriteFile(p, data[:1000], 0o644); err != nil {
				t.Fatalf("rewrite: %v", err)
			}
		}, data[:1000]},
		{"the file removed", 256 << 10, func(t *testing.T, f *os.File, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}, nil},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := uint64(i + 1)
			ver := filepath.Join(mnt, VersionName(v))
			if err := os.Mkdir(ver, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(ver, "other"), other)
			filler := fillTo(t, staging, tc.room)
			p := filepath.Join(ver, "w")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, err = f.WriteAt(data, 0)
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write %d bytes onto a full disk: %v, want ENOSPC", len(data), err)
			}
			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			// The disk has room again, but w misses bytes: DONE is refused, as often as
			// it is closed.
			for try := 1; try <= 2; try++ {
				err := seal(ver)
				wantErrno(t, fmt.Sprintf("seal #%d after the failed write", try), err, syscall.EIO)
				if _, ok := b.file(v, "other"); ok {
					t.Fatalf("seal #%d sealed version %d with a file whose write failed", try, v)
				}
			}
			found := false
			for _, l := range lg.(*testLog).logged() {
				found = found || (strings.Contains(l, VersionName(v)+"/w") && strings.Contains(l, "write it again"))
			}
			if !found {
				t.Errorf("no log line names %s/w and says to write it again", VersionName(v))
			}
			tc.mend(t, f, p)
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := seal(ver); err != nil {
				t.Fatalf("seal once w is mended: %v", err)
			}
			got, ok := b.file(v, "w")
			switch {
			case tc.want == nil && ok:
				t.Errorf("removed w was stored (%d bytes)", len(got))
			case tc.want != nil && !bytes.Equal(got, tc.want):
				t.Errorf("stored w: %d bytes, want %d (equal: %v)", len(got), len(tc.want), bytes.Equal(got, tc.want))
			}
			if got, _ := b.file(v, "other"); !bytes.Equal(got, other) {
				t.Errorf("stored other = %q", got)
			}
		})
	}
}

// TestFailedWritesRanges pins the bookkeeping of failed writes: a write clears what it covers,
// a truncate what lies beyond the new size.
func TestFailedWritesRanges(t *testing.T) {
	type op struct {
		kind     string // "fail", "write", "truncate"
		off, end int64
	}
	tests := []struct {
		name string
		ops  []op
		want []byteSpan
	}{
		{"one failure", []op{{"fail", 10, 20}}, []byteSpan{{10, 20}}},
		{"written again", []op{{"fail", 10, 20}, {"write", 0, 30}}, nil},
		{"written in part", []op{{"fail", 10, 20}, {"write", 12, 15}}, []byteSpan{{10, 12}, {15, 20}}},
		{"two failures, ordered", []op{{"fail", 50, 60}, {"fail", 10, 20}}, []byteSpan{{10, 20}, {50, 60}}},
		{"overlapping failures", []op{{"fail", 10, 20}, {"fail", 15, 30}}, []byteSpan{{10, 15}, {15, 30}}},
		{"truncated below", []op{{"fail", 10, 20}, {"fail", 50, 60}, {"truncate", 15, 0}}, []byteSpan{{10, 15}}},
		{"truncated to nothing", []op{{"fail", 10, 20}, {"truncate", 0, 0}}, nil},
		{"an empty failure", []op{{"fail", 10, 10}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w failedWrites
			for _, o := range tc.ops {
				switch o.kind {
				case "fail":
					w.add(o.off, o.end, syscall.ENOSPC)
				case "write":
					w.clear(o.off, o.end)
				case "truncate":
					w.truncate(o.off)
				}
			}
			if fmt.Sprint(w.spans) != fmt.Sprint(tc.want) || w.pending() != (len(tc.want) > 0) {
				t.Errorf("spans %v (pending %v), want %v", w.spans, w.pending(), tc.want)
			}
		})
	}
}
