package s3

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/pack"

	"github.com/weightfs/weightfs/delta"
)

// testModel is a small safetensors model whose versions each change about 1% of the elements
// of every tensor, as an RL step does.
type testModel struct {
	rng     *rand.Rand
	tensors []testTensor
}

func newTestModel(seed uint64, elems ...int) *testModel {
	m := &testModel{rng: rand.New(rand.NewPCG(seed, 1))}
	for i, n := range elems {
		m.tensors = append(m.tensors, testTensor{fmt.Sprintf("layer%d.weight", i), delta.DTypeBF16, []int64{int64(n)}, bf16Like(m.rng, n)})
	}
	return m
}

func (m *testModel) step() {
	for i := range m.tensors {
		m.tensors[i].data = perturb(m.rng, m.tensors[i].data, 2, 0.01)
	}
}

func (m *testModel) files(t testing.TB) map[string][]byte {
	return map[string][]byte{
		"model.safetensors": safetensorsFile(t, m.tensors...),
		"config.json":       []byte(`{"model_type": "test"}`),
	}
}

// startInitialized starts the test server, points the environment at it and initializes a
// fresh store at testURL.
func startInitialized(t *testing.T) (*s3test.Server, string) {
	t.Helper()
	srv := s3test.Start(t)
	srv.SetEnv(t)
	url := testURL(t)
	if err := Init(url, Config{}, nil); err != nil {
		t.Fatal(err)
	}
	return srv, url
}

// testURL is a fresh store address for this test.
func testURL(t testing.TB) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	return "s3://weightfs-test/" + name
}

func openTestStore(t testing.TB, url string, opts store.Options) *store.Store {
	t.Helper()
	return openTestStoreWith(t, url, Config{}, opts)
}

func openTestStoreWith(t testing.TB, url string, cfg Config, opts store.Options) *store.Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = logtest.New(t.Logf)
	}
	if opts.CacheDir == "" {
		opts.CacheDir = t.TempDir()
	}
	s, err := Open(url, cfg, opts)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	t.Cleanup(func() { verifyAndClose(t, s) })
	return s
}

// verifyAndClose runs Verify on s before it closes, as every store test does (store's
// closeStore): a test that leaves an S3 store damaged fails. A store the test closed already
// is left alone, and a test that has failed already is not verified.
func verifyAndClose(t testing.TB, s *store.Store) {
	t.Helper()
	if !t.Failed() && !t.Skipped() {
		rep, err := s.Verify(nil)
		if err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("verify of store %s before it closes: %v", s.Root(), err)
			for _, d := range rep.Damaged {
				t.Errorf("  %s", d)
			}
		}
	}
	s.Close()
}

func storeStats(t testing.TB, s *store.Store) Stats {
	t.Helper()
	b, ok := s.Backend().(*Backend)
	if !ok {
		t.Fatal("not an S3 store")
	}
	return b.Stats()
}

// TestS3StoreRoundTrip writes versions to a store in S3 and reads them back through a second
// store handle with its own cache, as an inference node does: every byte must match, a second
// writer is refused, and after the first version the reader downloads exactly the pack(s) a
// new version added (its objects and the pack tables) and its manifest, nothing else.
func TestS3StoreRoundTrip(t *testing.T) {
	_, url := startInitialized(t)
	if err := Init(url, Config{}, nil); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("second init: %v, want a 'not empty' error", err)
	}
	w := openTestStore(t, url, store.Options{})
	if _, err := Open(url, Config{}, store.Options{CacheDir: t.TempDir()}); !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "weightfs lease break") {
		t.Fatalf("second writer: %v, want store.ErrLocked naming 'weightfs lease break'", err)
	}
	r := openTestStore(t, url, store.Options{ReadOnly: true, Materialize: true})

	m := newTestModel(1, 300_000, 200_000, 5_000)
	want := map[uint64]map[string][]byte{}
	for v := uint64(1); v <= 4; v++ {
		if v > 1 {
			m.step()
		}
		want[v] = m.files(t)
		wbefore := storeStats(t, w)
		info, _ := commitTree(t, w, v, want[v])
		wafter := storeStats(t, w)
		before := storeStats(t, r)
		if err := r.Refresh(); err != nil {
			t.Fatalf("refresh after v%d: %v", v, err)
		}
		after := storeStats(t, r)
		if latest, _ := r.Latest(); latest != v {
			t.Fatalf("reader sees v%d, want v%d", latest, v)
		}
		for p, b := range want[v] {
			mustEqualBytes(t, fmt.Sprintf("v%d %s", v, p), readWhole(t, r, v, p), b)
		}
		if v == 1 {
			continue
		}
		// The version's objects are in the pack(s) its writer uploaded (store format 3): the
		// reader downloads exactly those packs, the objects' bytes plus each pack's table
		// (pack.EntryLen per object, pack.FooterLen per pack).
		objects := after.ObjectBytes - before.ObjectBytes
		packBytes, packs := wafter.PackUploadBytes-wbefore.PackUploadBytes, wafter.PackUploads-wbefore.PackUploads
		table := packBytes - info.StoredBytes - packs*pack.FooterLen
		if packs < 1 || table <= 0 || table%pack.EntryLen != 0 {
			t.Errorf("v%d: the writer uploaded %d packs of %d bytes for %d bytes of new objects", v, packs, packBytes, info.StoredBytes)
		}
		if objects != packBytes || after.PackDownloads-before.PackDownloads != packs || after.ManifestDownloads-before.ManifestDownloads != 1 {
			t.Errorf("v%d: reader downloaded %d object bytes (%d packs) and %d manifests; the version uploaded %d packs of %d bytes",
				v, objects, after.PackDownloads-before.PackDownloads, after.ManifestDownloads-before.ManifestDownloads, packs, packBytes)
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
	st, err := ReadStatsFile(r.CacheDir())
	if err != nil || st.ObjectBytes == 0 {
		t.Fatalf("stats file: %+v, %v", st, err)
	}
	info, err := ShowLease(url, Config{}, nil)
	if err != nil || !info.Held || info.Expired || !strings.Contains(info.Owner, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("lease: %+v, %v", info, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if info, err := ShowLease(url, Config{}, nil); err != nil || info.Held {
		t.Fatalf("lease after the writer closed: %+v, %v", info, err)
	}
}

// TestS3MultipartAndParallelDownload stores an object larger than the part size in a pack
// larger than the one-request bound (packWhole, lowered here to the part size as
// TestS3PackRequests does; 96 MiB in use): the pack goes up in parts, comes down by parallel
// ranged reads, and the fast download gives the same bytes as the reference one.
func TestS3MultipartAndParallelDownload(t *testing.T) {
	_, url := startInitialized(t)
	cfg := Config{PartSize: MinPartSize}
	w := openTestStoreWith(t, url, cfg, store.Options{})
	w.Backend().(*Backend).packWhole = MinPartSize // before anything is uploaded
	rng := rand.New(rand.NewPCG(3, 4))
	blob := randomBytes(rng, 2*MinPartSize+12345) // incompressible: the object is as large
	commitTree(t, w, 1, map[string][]byte{"blob.bin": blob})
	if st := storeStats(t, w); st.MultipartUploads != 1 || st.PackUploads < 1 {
		t.Fatalf("multipart uploads: %d, want 1; pack uploads %d, want some (%+v)", st.MultipartUploads, st.PackUploads, st)
	}
	r := openTestStoreWith(t, url, cfg, store.Options{ReadOnly: true})
	r.Backend().(*Backend).packWhole = MinPartSize
	mustEqualBytes(t, "blob read through a fresh reader", readWhole(t, r, 1, "blob.bin"), blob)
	if st := storeStats(t, r); st.PackDownloads < 1 {
		t.Fatalf("pack downloads: %d, want some (%+v)", st.PackDownloads, st)
	}

	be := r.Backend().(*Backend)
	var blobID store.ID
	var blobSize int64
	if err := be.ListPacks(func(id store.ID, size int64) error {
		if size > blobSize {
			blobID, blobSize = id, size
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	key := be.packKey(blobID)
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
	if err1 != nil || err2 != nil || n1 != n2 || n1 <= 2*MinPartSize {
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
	url := testURL(t)
	if err := Init(url, Config{}, nil); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Endpoint: "http://" + proxy.addr(), RetryFor: 300 * time.Millisecond}
	w := openTestStoreWith(t, url, cfg, store.Options{})
	m := newTestModel(5, 100_000, 50_000)
	v1 := m.files(t)
	commitTree(t, w, 1, v1)
	m.step()
	v2 := m.files(t)
	commitTree(t, w, 2, v2)

	r := openTestStoreWith(t, url, cfg, store.Options{ReadOnly: true})
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
	if st := storeStats(t, r); st.Retries == 0 || st.Failures == 0 {
		t.Errorf("reader counters after an outage: %+v, want retries and failures", st)
	}
}

// TestS3GCDropsVersionsForReaders runs gc on an S3 store while a reader has it open: the
// reader drops the removed versions at its next refresh and still reads the kept one.
func TestS3GCDropsVersionsForReaders(t *testing.T) {
	_, url := startInitialized(t)
	w := openTestStore(t, url, store.Options{})
	r := openTestStore(t, url, store.Options{ReadOnly: true, Materialize: true})
	m := newTestModel(7, 60_000, 30_000)
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
	fresh := openTestStore(t, url, store.Options{ReadOnly: true})
	for p, b := range last {
		mustEqualBytes(t, "v4 "+p+" by a fresh reader after gc", readWhole(t, fresh, 4, p), b)
	}
	if _, err := fresh.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// TestS3OpenErrors: what is not a store, or not reachable, says so.
func TestS3OpenErrors(t *testing.T) {
	srv, url := startInitialized(t)
	if _, err := Open(url+"-none", Config{}, store.Options{ReadOnly: true, CacheDir: t.TempDir()}); !errors.Is(err, store.ErrNotAStore) {
		t.Fatalf("open of an empty prefix: %v, want store.ErrNotAStore", err)
	}
	for _, bad := range []string{"s3://", "s3://B/x", "s3://bucket//x", "s3://bucket/../x"} {
		if _, err := Open(bad, Config{}, store.Options{ReadOnly: true}); err == nil {
			t.Errorf("open %q succeeded", bad)
		}
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	_, err := Open(url, Config{RetryFor: 1}, store.Options{ReadOnly: true, CacheDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("open with a wrong secret: %v, want an HTTP 403 error", err)
	}
	// A cache directory of one store is refused for another.
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.Secret)
	dir := t.TempDir()
	openTestStore(t, url, store.Options{ReadOnly: true, CacheDir: dir}).Close()
	if err := Init(url+"-other", Config{}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(url+"-other", Config{}, store.Options{ReadOnly: true, CacheDir: dir}); err == nil || !strings.Contains(err.Error(), "another store") {
		t.Fatalf("open with another store's cache: %v", err)
	}
}
