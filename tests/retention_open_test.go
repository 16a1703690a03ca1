package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// heldFile is a file of a version opened and mapped through a mount, as an engine that
// mmaps a checkpoint holds it while it loads.
type heldFile struct {
	what string
	f    *os.File
	data []byte // the mapping
}

func openAndMap(t *testing.T, what, p string) *heldFile {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		t.Fatalf("mmap %s: %v", p, err)
	}
	h := &heldFile{what: what, f: f, data: data}
	// An engine reads the header first: some pages are in the page cache, the rest are not.
	if _, err := f.ReadAt(make([]byte, 16<<10), 0); err != nil {
		t.Fatalf("%s: read the first 16 KiB: %v", what, err)
	}
	t.Cleanup(h.close)
	return h
}

func (h *heldFile) close() {
	if h.data != nil {
		syscall.Munmap(h.data)
		h.data = nil
	}
	if h.f != nil {
		h.f.Close()
		h.f = nil
	}
}

// fdSHA256 reads every byte through the descriptor (pread); a short read is an error.
func (h *heldFile) fdSHA256() (string, error) {
	st, err := h.f.Stat()
	if err != nil {
		return "", err
	}
	hash := sha256.New()
	n, err := io.Copy(hash, io.NewSectionReader(h.f, 0, st.Size()))
	if err != nil {
		return "", fmt.Errorf("read through the descriptor: %d of %d bytes: %w", n, st.Size(), err)
	}
	if n != st.Size() {
		return "", fmt.Errorf("read through the descriptor: %d of %d bytes, no error", n, st.Size())
	}
	return hex.EncodeToString(hash.Sum(nil)), nil
}

// mapSHA256 hashes the mapped bytes; a fault (SIGBUS) is an error, not a dead test.
func (h *heldFile) mapSHA256() (sum string, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("read through the mapping: %v", r)
		}
	}()
	s := sha256.Sum256(h.data)
	return hex.EncodeToString(s[:]), nil
}

// TestRetentionKeepsOpenFilesReadable: a file of v2 opened and mapped on a read-only mount
// that follows latest, and one on the writer's mount, while the writer (--keep-last 1) seals
// v3 and v4: retention keeps v2 while they are open (the reader's through a pin, the writer's
// through its own open handle), every byte reads back exact through the descriptors and the
// mappings, and once they are closed the next seal's retention drops v2 and the pin is gone.
func TestRetentionKeepsOpenFilesReadable(t *testing.T) {
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	rw, ro := rwAndROMountPoints(t, work)
	want := genSeries(t, work, 1_000_000, 43, 6, nil)
	writer := startMount(t, storeDir, rw, "--keep-last", "1", "--keep-exact")
	seal := func(v int) {
		t.Helper()
		run(t, "cp", "-r", srcDir(work, v), versionDir(rw, v))
		run(t, "touch", filepath.Join(versionDir(rw, v), "DONE"))
	}
	seal(1)
	seal(2)
	reader := startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"), "--poll", "100ms")
	if target, err := os.Readlink(filepath.Join(ro, "latest")); err != nil || target != filepath.Base(versionDir(ro, 2)) {
		t.Fatalf("the read-only mount's latest is %q (%v), want v2", target, err)
	}
	shards, _ := filepath.Glob(filepath.Join(srcDir(work, 2), "*.safetensors"))
	if len(shards) == 0 {
		t.Fatal("no shard in v2")
	}
	shard := filepath.Base(shards[0])
	held := []*heldFile{
		openAndMap(t, "v2 on the read-only mount (through latest)", filepath.Join(ro, "latest", shard)),
		openAndMap(t, "v2 on the writer's mount", filepath.Join(versionDir(rw, 2), shard)),
	}
	seal(3)
	seal(4)
	// Retention runs in the background after each seal: wait until it has dropped v3.
	var versions []uint64
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		_, versions = readLog(t, storeDir)
		if !slices.Contains(versions, 3) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("after the seal of v4 the store holds versions %v", versions)
	for _, h := range held {
		if got, err := h.fdSHA256(); err != nil || got != want[2][shard] {
			t.Errorf("%s, read through its descriptor after retention: sha256 %s, %v; want %s", h.what, got, err, want[2][shard])
		}
		if got, err := h.mapSHA256(); err != nil || got != want[2][shard] {
			t.Errorf("%s, read through its mapping after retention: sha256 %s, %v; want %s", h.what, got, err, want[2][shard])
		}
	}
	if !slices.Equal(versions, []uint64{2, 4}) {
		t.Errorf("with files of v2 open, retention (--keep-last 1) keeps %v, want [2 4]", versions)
	}
	if t.Failed() {
		t.Fatalf("writer's log:\n%s\nreader's log:\n%s", writer.out.String(), reader.out.String())
	}
	// Closed, they hold nothing: the pin goes, and the next seal's retention drops v2. (The
	// kernel tells the daemons of the closes asynchronously: one that came after the seal's
	// retention started lets the seal after it drop v2.)
	for _, h := range held {
		h.close()
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if pins, _ := filepath.Glob(filepath.Join(storeDir, "pins", "*.json")); len(pins) == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("pin records after the files were closed: %v\n%s", pins, reader.out.String())
		}
	}
	last := 5
	for ; last <= 6; last++ {
		seal(last)
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			_, versions = readLog(t, storeDir)
			if !slices.Contains(versions, uint64(last-1)) || time.Now().After(deadline) {
				break
			}
		}
		if !slices.Contains(versions, 2) {
			break
		}
	}
	if !slices.Equal(versions, []uint64{uint64(last)}) {
		t.Fatalf("after the files of v2 were closed, retention keeps %v, want [%d]\n%s", versions, last, writer.out.String())
	}
	if pins, _ := filepath.Glob(filepath.Join(storeDir, "pins", "*.json")); len(pins) != 0 {
		t.Fatalf("pin records after the files were closed: %v", pins)
	}
	sameHashes(t, "the last version", sha256sumTree(t, versionDir(rw, last)), want[last])
	reader.stop()
	writer.stop()
	verifyStore(t, storeDir)
}

// TestMountLatestIsPinned: `mount --read-only --version latest` serves the version that was
// latest at mount time and pins it: gc --keep-last 1 after two more commits keeps it, and the
// mount reads it exact. Its metrics still follow the store: latest_version and versions
// move as versions are sealed and dropped (a pinned mount's list is refreshed).
func TestMountLatestIsPinned(t *testing.T) {
	skipWithoutFUSE(t)
	if _, cli := mountBinary(t); !cli {
		t.Skip("cmd/weightfs does not build: --metrics-addr needs it")
	}
	work := t.TempDir()
	storeDir := filepath.Join(work, "store")
	initStore(t, storeDir)
	want := genSeries(t, work, 200_000, 47, 3, nil)
	mustCLI(t, "commit", storeDir, srcDir(work, 1))
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startMount(t, storeDir, mnt, "--read-only", "--version", "latest", "--poll", "100ms",
		"--cache-dir", filepath.Join(work, "cache"), "--metrics-addr", "127.0.0.1:0")
	url := metricsURL(t, d.out)
	if pins, _ := filepath.Glob(filepath.Join(storeDir, "pins", "*.json")); len(pins) != 1 {
		t.Fatalf("pin records of a mount of --version latest: %v\n%s", pins, d.out.String())
	}
	mustCLI(t, "commit", storeDir, srcDir(work, 2))
	mustCLI(t, "commit", storeDir, srcDir(work, 3))
	r := mustCLI(t, "gc", "--keep-last", "1", storeDir)
	if _, vs := readLog(t, storeDir); !slices.Equal(vs, []uint64{1, 3}) || !strings.Contains(r.stdout, "kept versions [1] for readers' pins") {
		t.Fatalf("gc --keep-last 1 with a mount of --version latest (v1) keeps %v:\n%s", vs, r.stdout)
	}
	sameHashes(t, "the mount of --version latest after two seals and gc", sha256sumTree(t, mnt), want[1])
	var latest, versions float64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		s := scrapeMetrics(t, url)
		latest, versions = s.value("weightfs_latest_version"), s.value("weightfs_versions")
		if latest == 3 && versions == 2 || time.Now().After(deadline) {
			break
		}
	}
	if latest != 3 || versions != 2 {
		t.Fatalf("a pinned mount's metrics: latest_version %v, versions %v; want 3 and 2 (the store's)", latest, versions)
	}
}
