package store

import (
	"errors"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// s3Model is a small safetensors model whose versions each change about 1% of the elements
// of every tensor, as an RL step does.
type s3Model struct {
	rng     *rand.Rand
	tensors []testTensor
}

func newS3Model(seed uint64, elems ...int) *s3Model {
	m := &s3Model{rng: rand.New(rand.NewPCG(seed, 1))}
	for i, n := range elems {
		m.tensors = append(m.tensors, testTensor{fmt.Sprintf("layer%d.weight", i), delta.DTypeBF16, []int64{int64(n)}, bf16Like(m.rng, n)})
	}
	return m
}

func (m *s3Model) step() {
	for i := range m.tensors {
		m.tensors[i].data = perturb(m.rng, m.tensors[i].data, 2, 0.01)
	}
}

func (m *s3Model) files(t testing.TB) map[string][]byte {
	return map[string][]byte{
		"model.safetensors": safetensorsFile(t, m.tensors...),
		"config.json":       []byte(`{"model_type": "test"}`),
	}
}

// s3URL is a fresh store address for this test.
func s3URL(t testing.TB) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	return "s3://weightfs-test/" + name
}

func openS3Store(t testing.TB, url string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = logtest.New(t.Logf)
	}
	if opts.CacheDir == "" {
		opts.CacheDir = t.TempDir()
	}
	s, err := Open(url, opts)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func s3Stats(t testing.TB, s *Store) S3Stats {
	t.Helper()
	st, ok := s.S3Stats()
	if !ok {
		t.Fatal("not an S3 store")
	}
	return st
}

// TestS3StoreRoundTrip writes versions to a store in S3 and reads them back through a second
// store handle with its own cache, as an inference node does: every byte must match, a second
// writer is refused, and after the first version the reader downloads exactly the objects a
// new version added and its manifest, nothing else.
func TestS3StoreRoundTrip(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	url := s3URL(t)
	if err := Init(url); err != nil {
		t.Fatal(err)
	}
	if err := Init(url); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("second init: %v, want a 'not empty' error", err)
	}
	w := openS3Store(t, url, Options{})
	if _, err := Open(url, Options{CacheDir: t.TempDir()}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "weightfs lease break") {
		t.Fatalf("second writer: %v, want ErrLocked naming 'weightfs lease break'", err)
	}
	r := openS3Store(t, url, Options{ReadOnly: true, Materialize: true})

	m := newS3Model(1, 300_000, 200_000, 5_000)
	want := map[uint64]map[string][]byte{}
	for v := uint64(1); v <= 4; v++ {
		if v > 1 {
			m.step()
		}
		want[v] = m.files(t)
		info, _ := commitTree(t, w, v, want[v])
		before := s3Stats(t, r)
		if err := r.Refresh(); err != nil {
			t.Fatalf("refresh after v%d: %v", v, err)
		}
		after := s3Stats(t, r)
		if latest, _ := r.Latest(); latest != v {
			t.Fatalf("reader sees v%d, want v%d", latest, v)
		}
		for p, b := range want[v] {
			mustEqualBytes(t, fmt.Sprintf("v%d %s", v, p), readWhole(t, r, v, p), b)
		}
		if v == 1 {
			continue
		}
		objects := after.ObjectBytes - before.ObjectBytes
		if objects != info.StoredBytes || after.ManifestDownloads-before.ManifestDownloads != 1 {
			t.Errorf("v%d: reader downloaded %d object bytes and %d manifests; the version stored %d bytes in new objects",
				v, objects, after.ManifestDownloads-before.ManifestDownloads, info.StoredBytes)
		}
		t.Logf("v%d: stored %d bytes; reader fetched %d object bytes + %d manifest bytes", v, info.StoredBytes, objects, after.ManifestBytes-before.ManifestBytes)
	}
	// Older versions replay deltas from the materialized latest copy.
	for v := uint64(1); v <= 3; v++ {
		for p, b := range want[v] {
			mustEqualBytes(t, fmt.Sprintf("v%d %s", v, p), readWhole(t, r, v, p), b)
		}
	}
	if rep, err := r.Verify(nil); err != nil {
		t.Fatalf("verify: %v (%v)", err, rep.Damaged)
	}
	// The counters are on disk too, for other processes.
	st, err := ReadS3StatsFile(r.cacheDir)
	if err != nil || st.ObjectBytes == 0 {
		t.Fatalf("stats file: %+v, %v", st, err)
	}
	info, err := ShowLease(url, Options{})
	if err != nil || !info.Held || info.Expired || !strings.Contains(info.Owner, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("lease: %+v, %v", info, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if info, err := ShowLease(url, Options{}); err != nil || info.Held {
		t.Fatalf("lease after the writer closed: %+v, %v", info, err)
	}
}

// TestS3MultipartAndParallelDownload stores an object larger than the part size: it goes up
// in parts, comes down by parallel ranged reads, and the fast download gives the same bytes
// as the reference one.
func TestS3MultipartAndParallelDownload(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	url := s3URL(t)
	if err := Init(url); err != nil {
		t.Fatal(err)
	}
	opts := Options{S3: S3Options{PartSize: MinS3PartSize}}
	w := openS3Store(t, url, opts)
	rng := rand.New(rand.NewPCG(3, 4))
	blob := randomBytes(rng, 2*MinS3PartSize+12345) // incompressible: the object is as large
	commitTree(t, w, 1, map[string][]byte{"blob.bin": blob})
	if st := s3Stats(t, w); st.MultipartUploads != 1 {
		t.Fatalf("multipart uploads: %d, want 1 (%+v)", st.MultipartUploads, st)
	}
	ropts := opts
	ropts.ReadOnly = true
	r := openS3Store(t, url, ropts)
	mustEqualBytes(t, "blob read through a fresh reader", readWhole(t, r, 1, "blob.bin"), blob)

	ver, err := r.sealedVersion(1)
	if err != nil {
		t.Fatal(err)
	}
	be := r.be.(*s3Backend)
	key := be.objectKey(ver.m.Files[0].ID)
	fast, err := os.Create(filepath.Join(t.TempDir(), "fast"))
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	slow, err := os.Create(filepath.Join(t.TempDir(), "slow"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	n1, err1 := be.downloadTo(be.ctx, key, fast)
	n2, err2 := be.downloadWhole(be.ctx, key, slow)
	if err1 != nil || err2 != nil || n1 != n2 || n1 <= 2*MinS3PartSize {
		t.Fatalf("downloads: parallel %d bytes (%v), reference %d bytes (%v)", n1, err1, n2, err2)
	}
	a, _ := os.ReadFile(fast.Name())
	b, _ := os.ReadFile(slow.Name())
	mustEqualBytes(t, "parallel download against the reference", a, b)
}

// TestS3OutageFailsCleanlyAndRecovers cuts the connection to the object store: reads that
// need it fail with an error carrying no errno (the mount answers EIO), a seal fails and
// leaves its writer usable, and everything works again once the store is back.
func TestS3OutageFailsCleanlyAndRecovers(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	proxy := startFlakyProxy(t, srv.Addr)
	url := s3URL(t)
	if err := Init(url); err != nil {
		t.Fatal(err)
	}
	opts := Options{S3: S3Options{Endpoint: "http://" + proxy.addr(), RetryFor: 300 * time.Millisecond}}
	w := openS3Store(t, url, opts)
	m := newS3Model(5, 100_000, 50_000)
	v1 := m.files(t)
	commitTree(t, w, 1, v1)
	m.step()
	v2 := m.files(t)
	commitTree(t, w, 2, v2)

	ropts := opts
	ropts.ReadOnly = true
	r := openS3Store(t, url, ropts)
	proxy.setDown(true)
	f, err := r.OpenFile(2, "model.safetensors")
	if err == nil {
		buf := make([]byte, f.Size())
		_, err = f.ReadAt(buf, 0)
		f.Close()
	}
	var errno syscall.Errno
	if err == nil || errors.As(err, &errno) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read while S3 is down: %v, want an error without errno", err)
	}
	if err := r.Refresh(); err == nil {
		t.Fatal("refresh while S3 is down succeeded")
	}
	m.step()
	v3 := m.files(t)
	vw, err := w.NewVersion(3)
	if err != nil {
		t.Fatal(err)
	}
	dir := writeTree(t, t.TempDir(), v3)
	for p, b := range v3 {
		src, err := os.Open(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		if err := vw.AddFile(p, src, int64(len(b)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := vw.Seal(); err == nil {
		t.Fatal("seal while S3 is down succeeded")
	}
	proxy.setDown(false)
	if _, err := vw.Seal(); err != nil {
		t.Fatalf("seal once S3 is back: %v", err)
	}
	if err := r.Refresh(); err != nil {
		t.Fatalf("refresh once S3 is back: %v", err)
	}
	for v, files := range map[uint64]map[string][]byte{1: v1, 2: v2, 3: v3} {
		for p, b := range files {
			mustEqualBytes(t, fmt.Sprintf("v%d %s after the outage", v, p), readWhole(t, r, v, p), b)
		}
	}
	if st := s3Stats(t, r); st.Retries == 0 || st.Failures == 0 {
		t.Errorf("reader counters after an outage: %+v, want retries and failures", st)
	}
}

// TestS3GCDropsVersionsForReaders runs gc on an S3 store while a reader has it open: the
// reader drops the removed versions at its next refresh and still reads the kept one.
func TestS3GCDropsVersionsForReaders(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	url := s3URL(t)
	if err := Init(url); err != nil {
		t.Fatal(err)
	}
	w := openS3Store(t, url, Options{})
	r := openS3Store(t, url, Options{ReadOnly: true, Materialize: true})
	m := newS3Model(7, 60_000, 30_000)
	var last map[string][]byte
	for v := uint64(1); v <= 4; v++ {
		if v > 1 {
			m.step()
		}
		last = m.files(t)
		commitTree(t, w, v, last)
		if err := r.Refresh(); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := w.GC(1)
	if err != nil {
		t.Fatal(err)
	}
	if rep.DroppedVersions != 3 {
		t.Fatalf("gc dropped %d versions, want 3", rep.DroppedVersions)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if vs := r.Versions(); len(vs) != 1 || vs[0].Number != 4 {
		t.Fatalf("reader versions after gc: %+v", vs)
	}
	for p, b := range last {
		mustEqualBytes(t, "v4 "+p+" after gc", readWhole(t, r, 4, p), b)
	}
	fresh := openS3Store(t, url, Options{ReadOnly: true})
	for p, b := range last {
		mustEqualBytes(t, "v4 "+p+" by a fresh reader after gc", readWhole(t, fresh, 4, p), b)
	}
	if _, err := fresh.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// TestS3OpenErrors: what is not a store, or not reachable, says so.
func TestS3OpenErrors(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	url := s3URL(t)
	if err := InitS3(url, S3Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(url+"-none", Options{ReadOnly: true, CacheDir: t.TempDir()}); !errors.Is(err, ErrNotAStore) {
		t.Fatalf("open of an empty prefix: %v, want ErrNotAStore", err)
	}
	for _, bad := range []string{"s3://", "s3://B/x", "s3://bucket//x", "s3://bucket/../x"} {
		if _, err := Open(bad, Options{ReadOnly: true}); err == nil {
			t.Errorf("open %q succeeded", bad)
		}
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	_, err := Open(url, Options{ReadOnly: true, CacheDir: t.TempDir(), S3: S3Options{RetryFor: 1}})
	if err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("open with a wrong secret: %v, want an HTTP 403 error", err)
	}
	// A cache directory of one store is refused for another.
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.Secret)
	dir := t.TempDir()
	openS3Store(t, url, Options{ReadOnly: true, CacheDir: dir}).Close()
	if err := InitS3(url+"-other", S3Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(url+"-other", Options{ReadOnly: true, CacheDir: dir}); err == nil || !strings.Contains(err.Error(), "another store") {
		t.Fatalf("open with another store's cache: %v", err)
	}
}

// TestS3WriterRestart: a writer that comes back (with its cache, or on a new machine with a
// fresh one) goes on where the store is; objects left by a writer that died before its seal
// are removed, and nothing sealed is touched.
func TestS3WriterRestart(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	url := s3URL(t)
	if err := Init(url); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	m := newS3Model(11, 80_000, 20_000)
	want := map[uint64]map[string][]byte{}
	w := openS3Store(t, url, Options{CacheDir: cache})
	for v := uint64(1); v <= 2; v++ {
		if v > 1 {
			m.step()
		}
		want[v] = m.files(t)
		commitTree(t, w, v, want[v])
	}
	countObjects := func(s *Store) int {
		n := 0
		if err := s.be.ListObjects(func(ID, int64) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	sealed := countObjects(w)
	// Die in the middle of version 3: its objects are uploaded, its manifest is not.
	m.step()
	vw, err := w.NewVersion(3)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range m.files(t) {
		if err := vw.AddFile(p, bytesReaderAt(b), int64(len(b)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.be.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	if n := countObjects(w); n <= sealed {
		t.Fatalf("the unsealed version uploaded nothing (%d objects, %d sealed)", n, sealed)
	}
	w.shutdown() // a crash: no clean-up, and the lease stays until it expires
	if _, err := BreakLease(url, Options{}); err != nil {
		t.Fatal(err)
	}

	// Back with the same cache: the dirty index makes it sweep the leftovers.
	w2 := openS3Store(t, url, Options{CacheDir: cache})
	if n := countObjects(w2); n != sealed {
		t.Fatalf("after the restart: %d objects, want the %d sealed ones", n, sealed)
	}
	want[3] = m.files(t)
	commitTree(t, w2, 3, want[3])
	w2.Close()

	// On another machine: a fresh cache, built from the store alone.
	m.step()
	want[4] = m.files(t)
	w3 := openS3Store(t, url, Options{})
	commitTree(t, w3, 4, want[4])
	// A reader that joins late builds its copy of the latest version from the store.
	r := openS3Store(t, url, Options{ReadOnly: true, Materialize: true})
	for v, files := range want {
		for p, b := range files {
			mustEqualBytes(t, fmt.Sprintf("v%d %s", v, p), readWhole(t, r, v, p), b)
		}
	}
	if _, err := r.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// bytesReaderAt serves a byte slice as an io.ReaderAt.
type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
