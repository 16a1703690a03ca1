package store

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"golang.org/x/sys/unix"
)

// TestBaseMemoryTiming is a measuring tool, not a test (docs/benchmarks-history.md,
// "Base in memory (issue 30 decision 3)"): with WEIGHTFS_BASEMEM_TIMING=DIR, where DIR/weight_v000001, ... hold checkpoints
// (weightfs-gen), it seals them into two stores, one without the base in memory and one with
// it, interleaved version by version, through the batch path (AddFile) or, with
// WEIGHTFS_BASEMEM_STREAM=1, streamed in 4 MiB writes (no FUSE). Before each version the
// materialized copy is dropped from the page cache (a trainer's node, whose RAM the trainer
// uses, keeps no multi-GB copy cached) and the source is read once (cached: its reads are not
// the base's). It logs per version and store: the time to ingest the files and to seal, the
// process's CPU per GB ingested, and the bytes the process read from and wrote to the disk
// (/proc/self/io), and the base bytes served from memory. With WEIGHTFS_BASEMEM_REFERENCE=1
// both stores keep the base in memory, and the first ("ref") streams on the reference path
// (ingester.streamReference: stream_keep.go), to measure the fast path against it.
func TestBaseMemoryTiming(t *testing.T) {
	src := os.Getenv("WEIGHTFS_BASEMEM_TIMING")
	if src == "" {
		t.Skip("set WEIGHTFS_BASEMEM_TIMING=DIR to measure the base in memory")
	}
	streamed := os.Getenv("WEIGHTFS_BASEMEM_STREAM") == "1"
	quiet := logtest.New(func(string, ...any) {})
	stores := map[string]*Store{}
	modes := []string{"off", "on"}
	if os.Getenv("WEIGHTFS_BASEMEM_REFERENCE") == "1" {
		modes[0] = "ref"
	}
	for _, mode := range modes {
		opts := Options{Logger: quiet}
		if mode != "off" {
			opts.BaseMemory = 4 << 30
		}
		// Not newStore: its Verify at the end would hash every version again.
		root := filepath.Join(t.TempDir(), "store")
		if err := Init(root); err != nil {
			t.Fatal(err)
		}
		s, err := Open(root, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		s.ingest.streamReference = mode == "ref"
		stores[mode] = s
	}
	var last uint64
	for v := uint64(1); ; v++ {
		dir := filepath.Join(src, "weight_v"+leftPad(v))
		if _, err := os.Stat(dir); err != nil {
			break
		}
		last = v
		for _, mode := range modes {
			s := stores[mode]
			dropFromPageCache(t, s.mat.path())
			warm(t, dir)
			m0 := s.BaseMemory()
			r0, w0 := procIO(t)
			cpu0 := cpuTime()
			start := time.Now()
			total := ingestDir(t, s, v, dir, streamed)
			ingest := time.Since(start)
			r1, w1 := procIO(t)
			cpu := cpuTime() - cpu0
			gb := float64(total) / 1e9
			t.Logf("v%d base_memory %-3s: %.2f GB ingested in %.2f s (%.0f MB/s) + seal %.2f s; %.2f CPU-s/GB; disk read %d MB, written %d MB; base from memory %d MB, from the copy %d MB, through the objects %d MB",
				v, mode, gb, ingest.Seconds(), gb*1e3/ingest.Seconds(), sealTook.Seconds(), cpu.Seconds()/gb,
				(r1-r0)/1e6, (w1-w0)/1e6, (s.BaseMemory().Served-m0.Served)/1e6, (s.BaseMemory().FromCopy-m0.FromCopy)/1e6, (s.BaseMemory().FromObjects-m0.FromObjects)/1e6)
		}
	}
	// A first read of the latest version by a reader of the writer's process: where the seal
	// deferred the copy (copy_defer.go), the copy is written now, in the background.
	for _, mode := range modes {
		s := stores[mode]
		dropFromPageCache(t, s.mat.path())
		r0, w0 := procIO(t)
		m0 := s.BaseMemory()
		cpu0 := cpuTime()
		start := time.Now()
		var total int64
		buf := make([]byte, 4<<20)
		for _, p := range s.versions.filePaths(t, last) {
			f, err := s.OpenFile(last, p)
			if err != nil {
				t.Fatal(err)
			}
			for off := int64(0); off < f.Size(); off += int64(len(buf)) {
				n, err := f.ReadAt(buf, off)
				if err != nil && err != io.EOF {
					t.Fatal(err)
				}
				total += int64(n)
			}
		}
		read := time.Since(start)
		s.mat.bg.Wait()
		r1, w1 := procIO(t)
		t.Logf("read of v%d base_memory %-3s: %.2f GB in %.2f s, the copy ready after %.2f s; %.2f CPU-s; disk read %d MB, written %d MB; from memory %d MB",
			last, mode, float64(total)/1e9, read.Seconds(), time.Since(start).Seconds(), (cpuTime() - cpu0).Seconds(), (r1-r0)/1e6, (w1-w0)/1e6, (s.BaseMemory().Read-m0.Read)/1e6)
	}
}

// filePaths is the paths of the files of version v.
func (vl *versionList) filePaths(t *testing.T, v uint64) []string {
	ver, err := vl.loadVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range ver.m.Files {
		out = append(out, ver.m.Files[i].Path)
	}
	return out
}

// sealTook is how long the last ingestDir's seal took.
var sealTook time.Duration

func leftPad(v uint64) string {
	s := strconv.FormatUint(v, 10)
	return strings.Repeat("0", max(0, 6-len(s))) + s
}

// ingestDir adds the files of dir as version v, by AddFile or streamed, and seals it; it
// returns the bytes ingested.
func ingestDir(t *testing.T, s *Store, v uint64, dir string, streamed bool) int64 {
	w, err := s.NewVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real // WalkDir does not follow a link it starts at
	}
	var total int64
	buf := make([]byte, 4<<20)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		info, _ := f.Stat()
		total += info.Size()
		if !streamed {
			return w.AddFile(rel, f, info.Size(), 0o644)
		}
		st, err := w.StreamFile(rel)
		if err != nil {
			return err
		}
		if _, err := io.CopyBuffer(struct{ io.Writer }{st}, struct{ io.Reader }{f}, buf); err != nil {
			return err
		}
		if err := st.Close(); err != nil {
			return err
		}
		return w.AddStream(rel, st, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	sealTook = time.Since(start)
	return total
}

// dropFromPageCache asks the kernel to drop the cached pages of every file under dir.
func dropFromPageCache(t *testing.T, dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if f, err := os.Open(p); err == nil {
				f.Sync()
				unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
				f.Close()
			}
		}
		return nil
	})
}

// warm reads every file under dir once (into the page cache).
func warm(t *testing.T, dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if f, err := os.Open(p); err == nil {
				io.Copy(io.Discard, f)
				f.Close()
			}
		}
		return nil
	})
}

// procIO returns read_bytes and write_bytes of /proc/self/io: what the process made the
// block devices read and write.
func procIO(t *testing.T) (read, written int64) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := strings.Cut(string(line), ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "read_bytes":
			read = n
		case "write_bytes":
			written = n
		}
	}
	return read, written
}
