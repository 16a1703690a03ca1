package store

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Seeds of the materialized copy. Once a version is sealed its copy is made from the copy of
// the previous version: brought forward in place (read, patched by the deltas, written back,
// checked) or, for the first version, built from its objects (decompressed, hashed, written),
// while the trainer may already be writing the next version, which waits for the copy. Either
// costs about as much CPU as the ingest itself. But a stream has every byte of its file in
// hand as it arrives: it writes them to a seed file beside the copy (seedWriter), and the
// update (forward) or the rebuild adopts a seed whose SHA-256 and size are those of a file of
// the version instead of making that file: a rename. The SHA-256 is the one the stream
// computed over the same bytes, and the sums the copy's reads are checked against are
// computed in that pass too, so a seed is exactly as checked as a file the update wrote.
// Seeds of versions up to the one the copy reaches that nobody adopts (a version never
// sealed, a file that left its stream) are removed then; all of them by the next Open.
type seeds struct {
	dir string
	chk *checks // where a finished stream's sums and composition go (copy_sums.go)

	mu     sync.Mutex
	byHash map[seedKey]seedFileRef // finished seeds: content -> file
}

type seedKey struct {
	sha  ID
	size int64
}

// seedFileRef is a finished seed and the version its stream wrote.
type seedFileRef struct {
	path    string
	version uint64
}

func newSeeds(dir string) *seeds {
	os.RemoveAll(dir) // a crashed process's seeds
	return &seeds{dir: dir, byHash: map[seedKey]seedFileRef{}}
}

// create starts a seed file.
func (sd *seeds) create() (*os.File, error) {
	if err := os.MkdirAll(sd.dir, cacheDirPerm); err != nil {
		return nil, err
	}
	return os.CreateTemp(sd.dir, "seed-*")
}

// add offers a finished seed holding size bytes with SHA-256 sha, written for version v.
func (sd *seeds) add(sha ID, size int64, path string, v uint64) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	key := seedKey{sha, size}
	if old, ok := sd.byHash[key]; ok {
		os.Remove(old.path)
		v = max(v, old.version)
	}
	sd.byHash[key] = seedFileRef{path, v}
}

// takePath removes the seed with the content of f from the offer and returns its file; the
// caller renames or removes it.
func (sd *seeds) takePath(f *manifestFile) (string, bool) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	key := seedKey{f.SHA256, f.Size}
	ref, ok := sd.byHash[key]
	delete(sd.byHash, key)
	return ref.path, ok
}

// take moves a seed with the content of f to rel below dir (reldir.go), if there is one.
func (sd *seeds) take(f *manifestFile, dir, rel string) bool {
	p, ok := sd.takePath(f)
	if !ok {
		return false
	}
	return moveInto(p, dir, rel) == nil
}

// holdsVersion says whether a finished seed of version v is on offer.
func (sd *seeds) holdsVersion(v uint64) bool {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	for _, ref := range sd.byHash {
		if ref.version == v {
			return true
		}
	}
	return false
}

// clearUpTo removes the finished seeds of versions up to v: no later update can adopt them
// (a version sealed after the copy reached v is numbered above it).
func (sd *seeds) clearUpTo(v uint64) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	for key, ref := range sd.byHash {
		if ref.version <= v {
			os.Remove(ref.path)
			delete(sd.byHash, key)
		}
	}
}

// seedWriter is a stream's seed file and the sums of the copy's file that will hold its
// bytes. The hasher that sees every byte of the file in order computes the sums in the same
// pass as the file's SHA-256 (sum) and hands each piece on (put) to a goroutine of the seed's
// own, which writes it to the seed file (seedFile) and lets go of its chunk. The file is
// written with O_DIRECT where the cache's file system takes it: from the chunk's own memory,
// which starts at the file offset's place in a page (chunkPool.get), so that nothing is
// copied, and without the page cache, whose fresh pages cost the kernel more than the update
// in place that the seed replaces (docs/design.md, "The materialized latest version"). Every
// stream has one; a stream of a first version only fed a seed before (copy_seed.go's seeds).
//
// Where the kernel has asynchronous I/O for the file (Linux, O_DIRECT: copy_seedaio_linux.go), the
// hasher submits the writes itself (putAsync) and there is no goroutine: with two streams on
// two busy cores, the seed's goroutine waited for a turn between its writes while the hasher
// waited for room in its queue, and the seeds were given up though the disk was idle. The
// goroutine remains where there is no asynchronous I/O, and is the reference the asynchronous
// writer is tested against (byte for byte).
//
// A seed that cannot keep up (a cache disk slower than ingest) is given up rather than
// slowing ingest down much: the copy is then brought forward in place for that file, as
// without seeds. A failure likewise only ends the seed, never the stream.
type seedWriter struct {
	sums sumWriter
	pool *chunkPool

	// The hasher's (then, once it has exited, Close's or Abort's).
	q      chan seedPiece // nil: no seed (none, given up, or ended)
	done   chan struct{}  // closed when the goroutine has exited
	file   *seedFile      // the goroutine's until done
	gaveUp bool           // the queue was full for too long
	off    int64          // bytes handed on
	start  time.Time      // when the seed started
	waited time.Duration  // how long the hasher waited for room in q, or for the disk
	async  bool           // the hasher writes the seed itself (file.aio); q and done are nil
}

// seedPiece is the next bytes of the file for the seed's goroutine; c (nil: data is not a
// chunk's) holds a reference for it.
type seedPiece struct {
	c    *chunk
	data []byte
}

// seedQueue is how many pieces may wait for the seed's writes (chunks of 4 MiB). When they
// are all waiting, the hasher waits for room, as long as its waits for the seed add up to at
// most a quarter of the stream's time so far (or seedMinWait): a disk that keeps up
// on average (a sequential O_DIRECT write of 4 MiB takes ~3 ms here) may fall behind for a
// moment, or for longer when other programs use it; one that is slower than ingest would slow
// it down by a quarter at most, and then the seed is given up.
const seedQueue = 2

// seedMinWait is the least time a stream's waits for its seed may add up to before the seed
// is given up (a variable so that a test can give a seed less).
var seedMinWait = time.Second

// seedAsync chooses the asynchronous writer where the kernel has one (a variable so that tests
// run both writers); seedTurn, if set, runs each time the seed's goroutine takes a piece
// (tests: a goroutine kept waiting for a core).
var (
	seedAsync = true
	seedTurn  func()
)

// startSeed starts writing a seed into f: the goroutine owns f until finish or drop.
func (w *seedWriter) startSeed(f *os.File, pool *chunkPool) {
	w.pool = pool
	w.file = &seedFile{f: f, direct: setDirect(f)}
	w.start = time.Now()
	if w.file.direct && seedAsync {
		if q, err := newAIOQueue(f); err == nil {
			w.file.aio, w.file.pool, w.async = q, pool, true
			return
		}
	}
	w.q = make(chan seedPiece, seedQueue)
	w.done = make(chan struct{})
	w.start = time.Now()
	go w.file.run(w.q, w.done, pool)
}

// sum adds bytes to the sums (the hasher, in the pass that hashes them).
func (w *seedWriter) sum(p []byte) {
	if w != nil {
		w.sums.Write(p)
	}
}

// put hands the next bytes of the file to the seed; c's reference for the seed (if c is not
// nil) goes with them, or is dropped here.
func (w *seedWriter) put(c *chunk, data []byte) {
	if w.async {
		w.putAsync(c, data)
		return
	}
	if w.q == nil || len(data) == 0 {
		c.release(w.pool)
		return
	}
	select {
	case w.q <- seedPiece{c, data}:
		w.off += int64(len(data))
		return
	default:
	}
	began := time.Now()
	t := time.NewTimer(max(seedMinWait, began.Sub(w.start)/4) - w.waited)
	defer t.Stop()
	select {
	case w.q <- seedPiece{c, data}:
		w.off += int64(len(data))
		w.waited += time.Since(began)
	case <-t.C:
		c.release(w.pool)
		w.gaveUp = true
		w.file.abandon.Store(true)
		close(w.q)
		w.q = nil
	}
}

// putAsync submits the writes of data (put's, with the asynchronous writer). It waits for the
// disk only while aioDepth writes are in flight, and gives the seed up once those waits add
// up to more than put's allowance.
func (w *seedWriter) putAsync(c *chunk, data []byte) {
	f := w.file
	if w.gaveUp || f.err != nil || len(data) == 0 {
		c.release(w.pool)
		return
	}
	began := time.Now()
	f.deadline = began.Add(max(seedMinWait, began.Sub(w.start)/4) - w.waited)
	before := f.aio.waited
	f.err = f.write(c, data)
	c.release(w.pool) // the writes in flight hold references of their own
	w.waited += f.aio.waited - before
	if errors.Is(f.err, errSeedBehind) {
		w.gaveUp = true
		f.aio.drain(w.pool)
		return
	}
	w.off += int64(len(data))
}

// finishAsync ends a seed of the asynchronous writer: ok, its last page and size; else its
// file goes.
func (w *seedWriter) finishAsync(sd *seeds, sha ID, size int64, v uint64) (gaveUp bool) {
	f := w.file
	w.file, w.async = nil, false
	ok := !w.gaveUp && f.err == nil && w.off == size
	if ok {
		f.err = f.end()
	}
	if err := f.aio.close(w.pool); f.err == nil {
		f.err = err
	}
	if err := f.f.Close(); f.err == nil {
		f.err = err
	}
	if !ok || f.err != nil || f.pos != size {
		os.Remove(f.f.Name())
		return w.gaveUp
	}
	sd.add(sha, size, f.f.Name(), v)
	return false
}

// finish records the sums of the stream's content and vouches for entry's composition (its
// objects and its SHA-256 were computed from the same bytes), then ends the seed and offers
// it, holding size bytes, for version v; gaveUp says the seed could not keep up. Only after
// the hashers have exited.
func (w *seedWriter) finish(sd *seeds, entry *manifestFile, size int64, v uint64) (gaveUp bool) {
	if w == nil {
		return false
	}
	sha := entry.SHA256
	if w.sums.size == size && sd.chk != nil {
		sd.chk.noteSums(contentKey{sha, size}, w.sums.sums())
		sd.chk.vouch(false, composition(entry))
	}
	if w.async {
		return w.finishAsync(sd, sha, size, v)
	}
	if w.done == nil {
		return w.gaveUp
	}
	ok := w.q != nil && w.off == size
	if w.q != nil {
		close(w.q)
		w.q = nil
	}
	if !ok {
		w.file.abandon.Store(true)
	}
	<-w.done
	f := w.file
	w.done, w.file = nil, nil
	if !ok || f.err != nil || f.pos != size {
		os.Remove(f.f.Name())
		return w.gaveUp
	}
	sd.add(sha, size, f.f.Name(), v)
	return false
}

// drop ends the seed and removes its file. Only after the hashers have exited, or before they
// started.
func (w *seedWriter) drop() {
	if w != nil && w.async {
		w.file.aio.close(w.pool)
		w.file.f.Close()
		os.Remove(w.file.f.Name())
		w.file, w.async = nil, false
		return
	}
	if w == nil || w.done == nil {
		return
	}
	w.file.abandon.Store(true)
	if w.q != nil {
		close(w.q)
		w.q = nil
	}
	<-w.done
	os.Remove(w.file.f.Name())
	w.done, w.file = nil, nil
}

// seedFile writes a file's bytes, given in order, to a seed file: whole pages with O_DIRECT
// straight from the pieces' memory where it is aligned like the file (else through a bounce
// page), the bytes of a page that straddles two pieces through carry. Without O_DIRECT (a
// file system that refuses it), plain writes. With aio, the O_DIRECT writes are submitted
// and complete later: a chunk's reference, or the carry page itself, goes with each.
type seedFile struct {
	f        *os.File
	direct   bool
	aio      *aioQueue   // the asynchronous writer; nil: writes return when done
	pool     *chunkPool  // aio: where the chunks of completed writes go
	deadline time.Time   // aio: how long write may wait for the disk
	abandon  atomic.Bool // stop writing: the seed is not wanted
	carry    []byte      // directAlign bytes: the page being filled
	fill     int         // bytes in carry
	pos      int64       // bytes written or carried
	err      error       // the first failure: the seed is not used
}

// run writes the pieces of q until it is closed, then ends the file (when it is wanted).
func (sf *seedFile) run(q chan seedPiece, done chan struct{}, pool *chunkPool) {
	defer close(done)
	for p := range q {
		if seedTurn != nil {
			seedTurn()
		}
		if sf.err == nil && !sf.abandon.Load() {
			sf.err = sf.write(p.c, p.data)
		}
		p.c.release(pool)
	}
	if sf.err == nil && !sf.abandon.Load() {
		sf.err = sf.end()
	}
	if err := sf.f.Close(); sf.err == nil {
		sf.err = err
	}
}

// write writes p, the memory of c (nil: not a chunk's, and with aio copied, since it is not
// held after write returns).
func (sf *seedFile) write(c *chunk, p []byte) error {
	if !sf.direct {
		n, err := sf.f.WriteAt(p, sf.pos)
		sf.pos += int64(n)
		return err
	}
	for len(p) > 0 {
		if sf.fill > 0 || len(p) < directAlign {
			if sf.carry == nil {
				sf.carry = alignedBuffer(directAlign)
			}
			n := copy(sf.carry[sf.fill:], p)
			sf.fill += n
			sf.pos += int64(n)
			p = p[n:]
			if sf.fill == directAlign {
				if err := sf.writeCarry(sf.pos - directAlign); err != nil {
					return err
				}
				sf.fill = 0
			}
			continue
		}
		// sf.pos is at a page boundary (carry is empty), and p holds a page or more.
		if uintptr(unsafe.Pointer(unsafe.SliceData(p)))%directAlign != 0 || sf.aio != nil && c == nil {
			// Not aligned like the file (a header's bytes), or not held: a page at a time
			// through carry.
			if sf.carry == nil {
				sf.carry = alignedBuffer(directAlign)
			}
			copy(sf.carry, p[:directAlign])
			if err := sf.writeCarry(sf.pos); err != nil {
				return err
			}
			sf.pos += directAlign
			p = p[directAlign:]
			continue
		}
		whole := len(p) &^ (directAlign - 1)
		if sf.aio != nil {
			c.refs.Add(1) // the write's, until it completes
			if err := sf.aio.submit(p[:whole], sf.pos, c, nil, sf.pool, sf.deadline); err != nil {
				c.release(sf.pool)
				return err
			}
		} else if err := sf.writeDirect(p[:whole], sf.pos); err != nil {
			return err
		}
		sf.pos += int64(whole)
		p = p[whole:]
	}
	return nil
}

// writeCarry writes the carry page at off; with aio the page goes with the write and a fresh
// one takes its place.
func (sf *seedFile) writeCarry(off int64) error {
	if sf.aio == nil {
		return sf.writeDirect(sf.carry, off)
	}
	if err := sf.aio.submit(sf.carry, off, nil, sf.carry, sf.pool, sf.deadline); err != nil {
		return err
	}
	sf.carry = sf.aio.page()
	return nil
}

// writeDirect writes b (whole pages, aligned) at off with O_DIRECT, or, if the device wants
// larger blocks, without it from now on.
func (sf *seedFile) writeDirect(b []byte, off int64) error {
	_, err := sf.f.WriteAt(b, off)
	if errors.Is(err, syscall.EINVAL) && clearDirect(sf.f) {
		sf.direct = false
		_, err = sf.f.WriteAt(b, off)
	}
	return err
}

// end writes the last, partial page and cuts the file to its size.
func (sf *seedFile) end() error {
	if sf.aio != nil {
		// The file's size was set ahead of the writes: it is cut once they are done.
		if sf.fill > 0 {
			clear(sf.carry[sf.fill:])
			sf.deadline = time.Time{}
			if err := sf.writeCarry(sf.pos - int64(sf.fill)); err != nil {
				return err
			}
		}
		if err := sf.aio.drain(sf.pool); err != nil {
			return err
		}
		return sf.f.Truncate(sf.pos)
	}
	if sf.fill == 0 {
		return nil
	}
	clear(sf.carry[sf.fill:])
	start := sf.pos - int64(sf.fill)
	if sf.direct {
		if err := sf.writeDirect(sf.carry, start); err != nil {
			return err
		}
	} else if _, err := sf.f.WriteAt(sf.carry[:sf.fill], start); err != nil {
		return err
	}
	return sf.f.Truncate(sf.pos)
}

// seedInto moves a seed holding file f into its place in the copy, if there is one.
func (m *materialized) seedInto(f *manifestFile) (bool, error) {
	if err := mkdirAllIn(m.dir, path.Dir(f.Path), cacheDirPerm); err != nil {
		return false, fmt.Errorf("materialized copy: %w", err)
	}
	return m.seeds.take(f, m.dir, f.Path), nil
}
