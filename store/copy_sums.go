package store

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/singleflight"
)

// The materialized copy is a checked cache (docs/format.md §6, §8). Every file of it has
// sums: the CRC-32C of each sumChunk of the file, keyed by the file's content (its SHA-256
// and size, from the manifest), never by a version number, so a state record that claims the
// copy holds another version finds sums of other content, and the reads it would serve fail
// their check. Sums are only ever computed from bytes that were SHA-256-checked in the same
// pass: the bytes a stream or a batch ingest received (the writer's own version), a file the
// rebuild wrote and checked, or one pass over a file of the copy that checks its SHA-256 (and
// its composition) against the manifest. Every read of the copy reads the whole chunks under
// it, checks them and only then copies bytes out (copy_read.go).
//
// A sum is 4 bytes for 64 KiB: 860 KB for a 14 GB model, kept in memory for the files of the
// copy and in the index (bucket copysums) so that a restart need not read the copy again.

// sumChunk is the unit the copy is checked in. Reads expand to whole chunks: 64 KiB keeps the
// sums small and the expansion of a 128 KiB-1 MiB FUSE read cheap (CRC-32C runs at more than
// 10 GB/s with SSE4.2).
const sumChunk = 64 << 10

// fileSums are the chunk CRCs of one file's content.
type fileSums struct {
	size int64
	crcs []uint32 // chunk i: bytes [i*sumChunk, min((i+1)*sumChunk, size))
}

// contentKey names a file's content: its SHA-256 and size.
type contentKey struct {
	sha  ID
	size int64
}

func keyOf(f *manifestFile) contentKey { return contentKey{f.SHA256, f.Size} }

// sumWriter computes the sums of bytes written to it in order.
type sumWriter struct {
	crcs []uint32
	cur  uint32
	fill int64
	size int64
}

func (w *sumWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(int64(len(p)), sumChunk-w.fill)
		w.cur = crc32.Update(w.cur, castagnoli, p[:k])
		w.fill += k
		w.size += k
		p = p[k:]
		if w.fill == sumChunk {
			w.crcs = append(w.crcs, w.cur)
			w.cur, w.fill = 0, 0
		}
	}
	return n, nil
}

// sums returns the sums of the bytes written; call it once, at the end.
func (w *sumWriter) sums() *fileSums {
	crcs := w.crcs
	if w.fill > 0 {
		crcs = append(crcs, w.cur)
	}
	return &fileSums{size: w.size, crcs: crcs}
}

// check compares the chunks that pieces cover, in order from file offset lo (a chunk
// boundary) to a chunk boundary or the end of the file, with the sums. On a mismatch it
// returns the chunk and both CRCs.
func (fs *fileSums) check(lo int64, pieces ...[]byte) (chunk int64, want, got uint32, ok bool) {
	chunk = lo / sumChunk
	var crc uint32
	left := min(sumChunk, fs.size-chunk*sumChunk)
	for _, p := range pieces {
		for len(p) > 0 {
			k := min(int64(len(p)), left)
			crc = crc32.Update(crc, castagnoli, p[:k])
			p, left = p[k:], left-k
			if left == 0 {
				if chunk >= int64(len(fs.crcs)) || fs.crcs[chunk] != crc {
					want = 0
					if chunk < int64(len(fs.crcs)) {
						want = fs.crcs[chunk]
					}
					return chunk, want, crc, false
				}
				chunk++
				crc = 0
				left = min(sumChunk, fs.size-chunk*sumChunk)
			}
		}
	}
	return 0, 0, 0, true
}

// composition is the digest of what a file of a manifest is made of: its size, its SHA-256
// and every object in order with the bytes it covers. A file is vouched for once the
// concatenation of those objects was seen to hash to that SHA-256; a manifest whose objects
// were swapped or replaced has another composition and is vouched for anew.
func composition(f *manifestFile) ID {
	h := sha256.New()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(f.Size))
	h.Write(b[:])
	h.Write(f.SHA256[:])
	add := func(id ID, start, end int64) {
		h.Write(id[:])
		binary.LittleEndian.PutUint64(b[:], uint64(start))
		h.Write(b[:])
		binary.LittleEndian.PutUint64(b[:], uint64(end))
		h.Write(b[:])
	}
	if f.Kind == kindBlob {
		add(f.ID, 0, f.Size)
	} else {
		add(f.Header, 0, f.HeaderLen)
		for i := range f.Tensors {
			t := &f.Tensors[i]
			add(t.ID, f.HeaderLen+t.Begin, f.HeaderLen+t.End)
		}
	}
	var id ID
	h.Sum(id[:0])
	return id
}

// checks remembers, for one process, the sums of file contents computed from checked bytes
// and the compositions vouched for, in memory (bounded) in front of the index.
type checks struct {
	ix *index

	mu      sync.Mutex
	sums    map[contentKey]*fileSums
	nsums   int // crcs held in sums
	vouched map[ID]bool
	failed  map[ID]error // compositions and objects found not to hash to their SHA-256 (verify_vouch.go, read_check.go)
	// checked are the objects whose rebuilt content hashed to their identity (read_check.go);
	// unsaved are those of them not yet recorded in the index.
	checked map[ID]bool
	unsaved []ID

	flight singleflight.Group // first reads of one file vouch for it once
}

// Bounds of what checks holds in memory: 16 MiB of sums (256 GiB of files), a million
// compositions. Forgetting costs a check again, never a wrong byte.
const (
	maxHeldSums = 4 << 20
	maxVouched  = 1 << 20
)

var (
	bucketCopySums = []byte("copysums")
	bucketVouched  = []byte("vouched")
)

func newChecks(ix *index) *checks {
	return &checks{ix: ix, sums: map[contentKey]*fileSums{}, vouched: map[ID]bool{}, failed: map[ID]error{}, checked: map[ID]bool{}}
}

// db runs fn in a transaction of the index (index.run: a damaged index is recreated and
// logged, never a crash; without an index a write is dropped). A record lost with the
// index is as good as missing: the check is done again.
func (c *checks) db(write bool, fn func(tx *bolt.Tx) error) error {
	if write {
		return c.ix.write(fn)
	}
	return c.ix.run(false, fn)
}

// noteFailedVouch remembers that composition id does not hash to its SHA-256: reads of the
// file fail at once rather than hash it again.
func (c *checks) noteFailedVouch(id ID, err error) {
	c.mu.Lock()
	if len(c.failed) >= 1024 {
		c.failed = map[ID]error{}
	}
	c.failed[id] = err
	c.mu.Unlock()
}

func (c *checks) failedVouch(id ID) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed[id]
}

// noteSums records the sums of content k, computed from bytes whose SHA-256 was checked.
func (c *checks) noteSums(k contentKey, fs *fileSums) {
	if fs == nil || fs.size != k.size {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nsums+len(fs.crcs) > maxHeldSums {
		c.sums, c.nsums = map[contentKey]*fileSums{}, 0
	}
	if old := c.sums[k]; old != nil {
		c.nsums -= len(old.crcs)
	}
	c.sums[k] = fs
	c.nsums += len(fs.crcs)
}

// sumsOf returns the sums of content k from memory or the index, or nil.
func (c *checks) sumsOf(k contentKey) *fileSums {
	c.mu.Lock()
	fs := c.sums[k]
	c.mu.Unlock()
	if fs != nil {
		return fs
	}
	var raw []byte
	c.db(false, func(tx *bolt.Tx) error {
		v, err := get(tx, bucketCopySums, sumsKey(k))
		raw = append(raw[:0], v...)
		return err
	})
	fs, ok := decodeSums(raw, k.size)
	if !ok {
		return nil
	}
	c.noteSums(k, fs)
	return fs
}

// vouch records that the compositions ids were checked against their files' SHA-256 (in
// the index too with persist: one transaction).
func (c *checks) vouch(persist bool, ids ...ID) {
	c.mu.Lock()
	if len(c.vouched)+len(ids) >= maxVouched {
		c.vouched = map[ID]bool{}
	}
	for _, id := range ids {
		c.vouched[id] = true
	}
	c.mu.Unlock()
	if persist && len(ids) > 0 {
		c.db(true, func(tx *bolt.Tx) error {
			for _, id := range ids {
				if err := put(tx, bucketVouched, id[:], nil); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// isVouched reports whether composition id was checked, by this process or (recorded in
// the index) an earlier one.
func (c *checks) isVouched(id ID) bool {
	c.mu.Lock()
	ok := c.vouched[id]
	c.mu.Unlock()
	if ok {
		return true
	}
	c.db(false, func(tx *bolt.Tx) error {
		v, err := get(tx, bucketVouched, id[:])
		ok = v != nil && err == nil
		return err
	})
	if ok {
		c.vouch(false, id)
	}
	return ok
}

// checkedKey is the index key (bucket vouched) recording that object id was checked: "o" and
// the id, 33 bytes, where a composition's key is its 32 bytes.
func checkedKey(id ID) []byte { return append([]byte{'o'}, id[:]...) }

// saveChecked is how many objects checked are recorded in the index in one transaction: a
// transaction per tensor would cost an fsync per tensor read. The ones not yet saved when the
// process ends are hashed again by the next one.
const saveChecked = 64

// noteCheckedObject records that object id's rebuilt content hashed to id (read_check.go).
func (c *checks) noteCheckedObject(id ID) {
	c.mu.Lock()
	if len(c.checked) >= maxVouched {
		c.checked = map[ID]bool{}
	}
	c.checked[id] = true
	c.unsaved = append(c.unsaved, id)
	full := len(c.unsaved) >= saveChecked
	c.mu.Unlock()
	if full {
		c.saveCheckedObjects()
	}
}

// saveCheckedObjects records in the index the objects checked since the last save (also at
// Close, by the materialized copy's close).
func (c *checks) saveCheckedObjects() {
	c.mu.Lock()
	save := c.unsaved
	c.unsaved = nil
	c.mu.Unlock()
	if len(save) == 0 {
		return
	}
	c.db(true, func(tx *bolt.Tx) error {
		for _, id := range save {
			if err := put(tx, bucketVouched, checkedKey(id), nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkedObject reports whether object id was checked, by this process or (recorded in the
// index) an earlier one.
func (c *checks) checkedObject(id ID) bool {
	c.mu.Lock()
	ok := c.checked[id]
	c.mu.Unlock()
	if ok {
		return true
	}
	c.db(false, func(tx *bolt.Tx) error {
		v, err := get(tx, bucketVouched, checkedKey(id))
		ok = v != nil && err == nil
		return err
	})
	if ok {
		c.mu.Lock()
		c.checked[id] = true
		c.mu.Unlock()
	}
	return ok
}

// keepSums writes the sums of the files of the copy to the index and drops every other
// record of sums there and in memory: the sums of other content were needed to check the
// copy once it held that content (a version ingested here, brought forward next), and the
// copy has moved past it. Sums of a version still being ingested may go too: the copy
// then reads its files once to sum them again.
func (c *checks) keepSums(held map[contentKey]*fileSums) error {
	c.mu.Lock()
	c.sums, c.nsums = map[contentKey]*fileSums{}, 0
	for k, fs := range held {
		c.sums[k] = fs
		c.nsums += len(fs.crcs)
	}
	c.mu.Unlock()
	return c.db(true, func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketCopySums)
		if err != nil {
			return err
		}
		var gone [][]byte
		b.ForEach(func(k, _ []byte) error {
			if len(k) != 40 {
				gone = append(gone, append([]byte(nil), k...))
				return nil
			}
			var ck contentKey
			copy(ck.sha[:], k)
			ck.size = int64(binary.BigEndian.Uint64(k[32:]))
			if held[ck] == nil {
				gone = append(gone, append([]byte(nil), k...))
			}
			return nil
		})
		for _, k := range gone {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		for k, fs := range held {
			if b.Get(sumsKey(k)) == nil {
				if err := b.Put(sumsKey(k), sealValue(sumsKey(k), encodeSums(fs))); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// sumsKey is the index key of content k's sums: its SHA-256, then its size (u64 BE).
func sumsKey(k contentKey) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), k.sha[:]...), uint64(k.size))
}

// encodeSums: the chunk size (u32 LE), then each chunk's CRC-32C (u32 LE).
func encodeSums(fs *fileSums) []byte {
	b := binary.LittleEndian.AppendUint32(make([]byte, 0, 4+4*len(fs.crcs)), sumChunk)
	for _, c := range fs.crcs {
		b = binary.LittleEndian.AppendUint32(b, c)
	}
	return b
}

func decodeSums(b []byte, size int64) (*fileSums, bool) {
	if len(b) < 4 || binary.LittleEndian.Uint32(b) != sumChunk || (len(b)-4)%4 != 0 {
		return nil, false
	}
	n := (len(b) - 4) / 4
	if int64(n) != (size+sumChunk-1)/sumChunk {
		return nil, false
	}
	fs := &fileSums{size: size, crcs: make([]uint32, n)}
	for i := range fs.crcs {
		fs.crcs[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return fs, true
}

// scanCopyFile reads file f of the copy once, computing its sums, and accepts them only if
// its SHA-256 is the manifest's. With segments, it also checks that each object's bytes
// hash to the object's identity: the composition, when nothing else vouched for it.
func (m *materialized) scanCopyFile(f *manifestFile, segments bool) (*fileSums, error) {
	return scanCopyFile(m.dir, f, segments)
}

// scanCopyFile is materialized.scanCopyFile for the copy in dir.
func scanCopyFile(dir string, f *manifestFile, segments bool) (*fileSums, error) {
	in, err := openCacheFileIn(dir, f.Path)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	fileHash := sha256.New()
	var sw sumWriter
	var segs []segment
	if segments {
		segs = (*Store)(nil).newVersionFile(nil, f, readOpts{}).segs
	}
	buf := make([]byte, 1<<20)
	objHash := sha256.New()
	seg := 0
	for off := int64(0); off < f.Size; {
		n := min(int64(len(buf)), f.Size-off)
		b := buf[:n]
		if err := readFull(in, b, off); err != nil {
			return nil, err
		}
		fileHash.Write(b)
		sw.Write(b)
		for segments && len(b) > 0 && seg < len(segs) {
			sg := segs[seg]
			pos := off + n - int64(len(b))
			if pos < sg.start {
				b = b[min(sg.start-pos, int64(len(b))):]
				continue
			}
			k := min(int64(len(b)), sg.end-pos)
			objHash.Write(b[:k])
			b = b[k:]
			if pos+k == sg.end {
				var got ID
				objHash.Sum(got[:0])
				objHash.Reset()
				if got != sg.id {
					return nil, fmt.Errorf("%s: bytes [%d, %d) hash to %s, the manifest names object %s: %w",
						f.Path, sg.start, sg.end, got, sg.id, ErrCorrupt)
				}
				seg++
			}
		}
		off += n
	}
	var got ID
	fileHash.Sum(got[:0])
	if got != f.SHA256 {
		return nil, fmt.Errorf("%s hashes to %s, the manifest says %s: %w", f.Path, got, f.SHA256, ErrCorrupt)
	}
	return sw.sums(), nil
}
