package store

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/weightfs/weightfs/delta"
)

// evictCopy drops the copy's files from the kernel's page cache (written back first: only
// clean pages can be dropped).
func evictCopy(t *testing.T, m *materialized) {
	t.Helper()
	err := filepath.WalkDir(m.dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // no copy yet
		}
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Sync(); err != nil {
			return err
		}
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
	if err != nil {
		t.Fatalf("evict the copy from the page cache: %v", err)
	}
}

// TestReadPageDirect reads every page of the copy's tensors with readPage while the kernel
// holds none, the first part or all of its bytes, at file offsets in many positions within a
// block, and compares with reading the same bytes through the page cache. Then: a file system
// that refuses O_DIRECT, and a copy cut short.
func TestReadPageDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	// Odd tensor lengths put the pages' first bytes at many offsets within a file block.
	var tensors []testTensor
	for i, n := range []int{3<<19 + 7, 5000, 1<<20 + 4097, 70001} {
		tensors = append(tensors, testTensor{string(rune('a' + i)), delta.DTypeBF16, []int64{int64(n)}, bf16Like(rng, n)})
	}
	s, _ := newStore(t, Options{})
	commitTree(t, s, 1, map[string][]byte{"model.safetensors": safetensorsFile(t, tensors...)})
	view := s.mat.view()
	if view == nil {
		t.Fatal("no materialized copy")
	}
	released := false
	defer func() {
		if !released {
			view.release()
		}
	}()

	type pageRef struct {
		id     ID
		off, n int64
	}
	var pages []pageRef
	for id := range view.m.locs {
		m, err := s.objects.meta(id)
		if err != nil {
			t.Fatal(err)
		}
		for off := int64(0); off < m.ContentLen; off += pageSize {
			n := min(pageSize, m.ContentLen-off)
			pages = append(pages, pageRef{id, off, n})
		}
	}
	want := func(p pageRef) []byte {
		b := make([]byte, p.n)
		if err := view.readAt(p.id, b, p.off); err != nil {
			t.Fatal(err)
		}
		return b
	}
	read := func(what string, p pageRef) bool {
		t.Helper()
		page := s.objects.bufs.newPage(p.n)
		defer page.release()
		direct, err := view.readPage(p.id, page, p.off)
		if err != nil {
			t.Fatalf("%s: page at %d of %s: %v", what, p.off, p.id, err)
		}
		mustEqualBytes(t, what, page.b, want(p))
		return direct
	}

	directs := 0
	for _, p := range pages {
		evictCopy(t, s.mat)
		loc := view.m.locs[p.id]
		f, err := view.m.file(loc.path)
		if err != nil {
			t.Fatal(err)
		}
		cached, known := rangeCached(f, loc.off+p.off, p.n)
		if !known {
			t.Skip("the kernel has no cachestat(2): every page is read through the page cache")
		}
		if read("cold", p) {
			directs++
		} else if !cached && p.n >= minRecycledLen && !view.m.noDirect {
			t.Fatalf("page at %d of %s: not cached, yet not read with O_DIRECT", p.off, p.id)
		}
		// The kernel holds the first part: the page is read from the disk whole.
		evictCopy(t, s.mat)
		if _, err := f.ReadAt(make([]byte, p.n/3), loc.off+p.off); err != nil {
			t.Fatal(err)
		}
		if !read("first third cached", p) && p.n >= minRecycledLen && !view.m.noDirect {
			t.Fatalf("page at %d of %s: partly cached, yet read from the page cache", p.off, p.id)
		}
		// All cached: no O_DIRECT.
		if _, err := f.ReadAt(make([]byte, p.n), loc.off+p.off); err != nil {
			t.Fatal(err)
		}
		if read("warm", p) {
			t.Fatalf("page at %d of %s: cached, yet read with O_DIRECT", p.off, p.id)
		}
	}
	if view.m.noDirect {
		t.Skip("the test directory's file system refuses O_DIRECT: only the page cache was read")
	}
	if directs == 0 {
		t.Fatal("no page was read with O_DIRECT")
	}

	// A file system without O_DIRECT: the page cache serves every page.
	view.m.filesMu.Lock()
	view.m.noDirect = true
	view.m.filesMu.Unlock()
	for _, p := range pages {
		evictCopy(t, s.mat)
		if read("no O_DIRECT", p) {
			t.Fatal("O_DIRECT used on a file system that refused it")
		}
	}
	view.m.filesMu.Lock()
	view.m.noDirect = false
	view.m.filesMu.Unlock()

	// A device that refuses the alignment (here: a buffer off by one byte in memory, which
	// O_DIRECT refuses with EINVAL like a larger block size): the page cache from then on.
	var big pageRef
	for _, p := range pages {
		if p.n == pageSize {
			big = p
			break
		}
	}
	evictCopy(t, s.mat)
	odd := &cachedPage{raw: alignedBuffer(pageBufferLen + 1)[1:]}
	odd.b = odd.raw[:big.n]
	if direct, err := view.readPage(big.id, odd, big.off); err != nil || direct || !view.m.noDirect {
		t.Fatalf("misaligned buffer: direct %v, err %v, O_DIRECT given up %v", direct, err, view.m.noDirect)
	}
	mustEqualBytes(t, "after EINVAL", odd.b, want(big))
	view.m.filesMu.Lock()
	view.m.noDirect = false
	view.m.filesMu.Unlock()

	// A copy cut short: the read fails and the copy is marked for rebuilding.
	var last pageRef
	for _, p := range pages {
		if loc := view.m.locs[p.id]; loc.off+p.off+p.n > view.m.locs[last.id].off+last.off+last.n {
			last = p
		}
	}
	loc := view.m.locs[last.id]
	if err := os.Truncate(filepath.Join(view.m.dir, loc.path), loc.off+last.off+last.n-100); err != nil {
		t.Fatal(err)
	}
	evictCopy(t, s.mat)
	page := s.objects.bufs.newPage(last.n)
	defer page.release()
	if _, err := view.readPage(last.id, page, last.off); err == nil || !isCopyError(err) {
		t.Fatalf("read of a page past the copy's end: err %v, want a copy error", err)
	}
	// The failed read started a rebuild in the background (which clears the broken mark when
	// it is done, so the mark itself is no stable thing to test): wait for it, then the copy
	// is whole again.
	view.release() // the update takes the copy away from its readers first
	released = true
	s.mat.bg.Wait()
	st, err := os.Stat(filepath.Join(s.mat.dir, loc.path))
	if err != nil || st.Size() < loc.off+last.off+last.n || s.mat.broken.Load() {
		t.Fatalf("after the rebuild: %v, size %d, broken %v", err, st.Size(), s.mat.broken.Load())
	}
}

// TestStreamMatchesBatchWithColdCopy is TestStreamMatchesBatch with the copies out of the page
// cache before every version: the bases of both paths are then read with O_DIRECT, the next
// chunk of a base in the background.
func TestStreamMatchesBatchWithColdCopy(t *testing.T) {
	streamAndBatch(t, streamSeries(t, 4, 3), 7, func(s *Store) { evictCopy(t, s.mat) })
}

// TestBaseReaderReadsAhead reads two objects of the cold copy in chunks, as a stream's worker
// reads the bases of two tensors in turn: each chunk after the very first comes from the read
// ahead, the second object's first chunk too (named as next at the first's last chunk). A
// read elsewhere, a chunk longer than the buffers and a warm copy give the same bytes as
// reading through the page cache.
func TestBaseReaderReadsAhead(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	const elems, elems2 = 5<<20 + 333, 3<<20 + 5 // 10 MiB and a bit (three chunks); 6 MiB
	s, _ := newStore(t, Options{})
	commitTree(t, s, 1, map[string][]byte{"model.safetensors": safetensorsFile(t,
		testTensor{"w", delta.DTypeBF16, []int64{elems}, bf16Like(rng, elems)},
		testTensor{"v", delta.DTypeBF16, []int64{elems2}, bf16Like(rng, elems2)})})
	view := s.mat.view()
	if view == nil {
		t.Fatal("no materialized copy")
	}
	defer view.release()
	var ids []ID // the tensors' (not the header's), the larger first
	sizes := map[ID]int64{}
	want := map[ID][]byte{}
	for id := range view.m.locs {
		m, err := s.objects.meta(id)
		if err != nil {
			t.Fatal(err)
		}
		if m.ContentLen < 1<<20 {
			continue
		}
		ids = append(ids, id)
		sizes[id] = m.ContentLen
		want[id] = make([]byte, m.ContentLen)
		if err := view.readAt(id, want[id], 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(ids) != 2 {
		t.Fatalf("the copy holds %d tensors, want 2", len(ids))
	}
	if sizes[ids[0]] < sizes[ids[1]] {
		ids[0], ids[1] = ids[1], ids[0]
	}
	evictCopy(t, s.mat)
	if _, known := rangeCached(mustFile(t, view, ids[0]), 0, 1); !known {
		t.Skip("the kernel has no cachestat(2)")
	}
	r := baseReader{in: s.ingest}
	defer r.wait()
	for k, id := range ids {
		size := sizes[id]
		for off := int64(0); off < size; off += ingestChunk {
			n := min(ingestChunk, size-off)
			var next nextRead
			if k == 0 && off+n == size {
				next = nextRead{id: ids[1], n: sizes[ids[1]]}
			}
			cur := r.cur
			b, err := r.read(view, id, off, n, next)
			if err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, fmt.Sprintf("object %d, chunk at %d", k, off), b, want[id][off:off+n])
			if (k > 0 || off > 0) && r.cur == cur && !view.m.noDirect {
				t.Fatalf("object %d, chunk at %d: not the read ahead", k, off)
			}
			if (k == 0 || off+n < size) && r.ahead == nil && !view.m.noDirect {
				t.Fatalf("object %d, chunk at %d: nothing read ahead", k, off)
			}
		}
	}
	// Elsewhere (the read ahead is dropped), too long for the buffers, and warm.
	id := ids[0]
	for _, c := range []struct{ off, n int64 }{{12345, 1000}, {7, ingestChunk + 10}, {12345, 1000}} {
		b, err := r.read(view, id, c.off, c.n, nextRead{})
		if err != nil {
			t.Fatal(err)
		}
		mustEqualBytes(t, fmt.Sprintf("%d bytes at %d", c.n, c.off), b, want[id][c.off:c.off+c.n])
	}
}

func mustFile(t *testing.T, view *matView, id ID) *os.File {
	t.Helper()
	f, err := view.m.file(view.m.locs[id].path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
