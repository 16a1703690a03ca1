package delta

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/zeebo/xxh3"
)

// The read pass of an apply: the target is read once, in large chunks, and hashed twice, as
// it is and as the patch makes it. The parallel scan runs the two halves on two goroutines
// (read + hash the chunk as it is; patch the chunk in place + hash it), which on two cores
// takes the time of one; scanSequential is its simple reference and tests compare them.

// digestKind is the whole-file hash an apply checks.
type digestKind int

const (
	digestXXH3   digestKind = iota // xxh3-128, canonical big-endian: base_xxh3:/result_xxh3:
	digestSHA256                   // SHA-256: base_sha256:/result_sha256:
)

func (k digestKind) String() string {
	if k == digestXXH3 {
		return "xxh3-128"
	}
	return "SHA-256"
}

// chooseDigest is xxh3-128 when the patch records it for f and SHA-256 was not asked for.
// SHA-256 asked of a file the patch records by xxh3-128 only is an error.
func chooseDigest(f PatchFile, opts ApplyOptions) (digestKind, error) {
	if f.XXH3Only && opts.VerifySHA256 {
		return digestSHA256, fmt.Errorf("the patch records no SHA-256 of %q (xxh3-128 only), so it cannot be checked by SHA-256", f.Name)
	}
	if f.HasXXH3 && !opts.VerifySHA256 {
		return digestXXH3, nil
	}
	return digestSHA256, nil
}

// digest is a hash value of either kind (xxh3 uses the first 16 bytes); comparable.
type digest struct {
	n   int
	sum [32]byte
}

func (d digest) String() string { return hex.EncodeToString(d.sum[:d.n]) }

func xxh3Digest(b [16]byte) digest {
	d := digest{n: 16}
	copy(d.sum[:], b[:])
	return d
}

// want returns the base and result digests the patch records for f.
func (k digestKind) want(f PatchFile) (base, result digest) {
	if k == digestXXH3 {
		return xxh3Digest(f.BaseXXH3), xxh3Digest(f.ResultXXH3)
	}
	return digest{n: 32, sum: f.BaseSHA256}, digest{n: 32, sum: f.ResultSHA256}
}

// digestHasher hashes one stream into a digest.
type digestHasher interface {
	io.Writer
	digest() digest
}

type xxh3Hasher struct{ *xxh3.Hasher }

func (h xxh3Hasher) digest() digest { return xxh3Digest(h.Sum128().Bytes()) }

type sha256Hasher struct{ hash.Hash }

func (h sha256Hasher) digest() digest {
	d := digest{n: 32}
	h.Sum(d.sum[:0])
	return d
}

func (k digestKind) newHasher() digestHasher {
	if k == digestXXH3 {
		return xxh3Hasher{xxh3.New()}
	}
	return sha256Hasher{sha256.New()}
}

// appliedTensor pairs a changed tensor of the patch with its place in the target.
type appliedTensor struct {
	plan   PatchTensor
	target Tensor
}

// targetLayout is what the header of the target says about where the changes go.
type targetLayout struct {
	first8    [8]byte // the target's first 8 bytes as found (the marker, when resuming)
	prefix    []byte  // the 8+N header bytes with the first 8 as the file's own (override applied)
	newPrefix []byte  // the result's 8+N header bytes when the patch changes the header in place
	dataStart int64
	tensors   []appliedTensor // sorted by offset
}

// scanChunk is the read size of the pass over the target; mappedChunk the piece of a mapped
// target that is copied, patched and hashed at a time (it stays in the core's cache).
const (
	scanChunk   = 4 << 20
	mappedChunk = 256 << 10
)

// scanBuffers is the number of chunks in flight in the parallel scan.
const scanBuffers = 3

// readTargetLayout reads and parses the target's header and finds the patched tensors in it.
// override, when set, replaces the target's first 8 bytes (the marker of an interrupted apply).
//
// With newHeader (the patch changes the header in place: same length, same tensor places) the
// tensors are found in newHeader rather than in the target, whose header an interrupted apply
// may have left half written; the target's header must have newHeader's length.
func readTargetLayout(tensors []PatchTensor, target io.ReaderAt, size int64, name string, override *[8]byte, newHeader []byte) (targetLayout, error) {
	var l targetLayout
	if size < 8 {
		return l, fmt.Errorf("%w: %s has %d bytes, too short to be a safetensors file", ErrBaseMismatch, name, size)
	}
	if err := readFull(target, l.first8[:], 0); err != nil {
		return l, fmt.Errorf("read %s: %w", name, err)
	}
	first8 := l.first8
	if override != nil {
		first8 = *override
	} else if string(first8[:]) == applyMarker {
		return l, fmt.Errorf("%w: %s is marked by an interrupted weightfs apply whose journal is missing; it is neither version, restore it from a copy",
			ErrBaseMismatch, name)
	}
	n, err := HeaderLength(first8[:], size)
	if err != nil {
		return l, fmt.Errorf("%w: %s is not the patch's base: %v", ErrBaseMismatch, name, err)
	}
	l.prefix = make([]byte, 8+n)
	copy(l.prefix, first8[:])
	if err := readFull(target, l.prefix[8:], 8); err != nil {
		return l, fmt.Errorf("read header of %s: %w", name, err)
	}
	parsed := l.prefix
	if newHeader != nil {
		if len(newHeader) != len(l.prefix) {
			return l, fmt.Errorf("%w: %s has a header of %d bytes, the patch's new header has %d", ErrBaseMismatch, name, len(l.prefix), len(newHeader))
		}
		parsed, l.newPrefix = newHeader, newHeader
	}
	h, err := ParseHeader(parsed, size)
	if err != nil {
		return l, fmt.Errorf("%w: %s is not the patch's base: %v", ErrBaseMismatch, name, err)
	}
	l.dataStart = h.DataStart()
	byName := tensorsByName(h)
	for _, t := range tensors {
		th, ok := byName[t.Name]
		if !ok || th.DType != t.DType || th.Elements() != t.Elements {
			return l, fmt.Errorf("%w: %s has no tensor %q of %s with %d elements (found %v)", ErrBaseMismatch, name, t.Name, t.DType, t.Elements, th)
		}
		l.tensors = append(l.tensors, appliedTensor{plan: t, target: th})
	}
	slices.SortFunc(l.tensors, func(a, b appliedTensor) int { return cmpInt64(a.target.Begin, b.target.Begin) })
	return l, nil
}

// outPrefix is the header bytes of the result: the new header, or the target's own.
func (l *targetLayout) outPrefix() []byte {
	if l.newPrefix != nil {
		return l.newPrefix
	}
	return l.prefix
}

// scanResult is what the read pass learned: the digest of the target as it is (with the
// recorded first 8 bytes in place of a marker) and as the patch makes it.
type scanResult struct {
	input, output digest
}

// scanTarget reads the target once, hashing it as it is and as the patch would make it.
// With a mapping of the target it reads the mapping (scanMapped), and skips the input hash
// unless needInput; otherwise it reads with ReadAt.
func scanTarget(p *Patch, l targetLayout, target io.ReaderAt, m *fileMapping, size int64, kind digestKind, needInput bool, cfg applyConfig) (scanResult, error) {
	chunk := cfg.chunk
	if chunk <= 0 {
		chunk = scanChunk
	}
	switch {
	case cfg.sequential:
		return scanSequential(p, l, target, size, kind, chunk)
	case m != nil:
		return scanMapped(p, l, m.data, kind, needInput, min(chunk, mappedChunk))
	}
	return scanParallel(p, l, target, size, kind, chunk)
}

// scanSequential is the reference scan: read a chunk, hash it, patch it, hash it again.
func scanSequential(p *Patch, l targetLayout, target io.ReaderAt, size int64, kind digestKind, chunk int64) (scanResult, error) {
	in, out := kind.newHasher(), kind.newHasher()
	in.Write(l.prefix)
	out.Write(l.outPrefix())
	patcher := newChunkPatcher(p, l.tensors)
	buf := make([]byte, chunk)
	for off := int64(0); off < size-l.dataStart; off += chunk {
		c := buf[:min(chunk, size-l.dataStart-off)]
		if err := readFull(target, c, l.dataStart+off); err != nil {
			return scanResult{}, fmt.Errorf("read at %d: %w", l.dataStart+off, err)
		}
		in.Write(c)
		if err := patcher.patch(c, off); err != nil {
			return scanResult{}, err
		}
		out.Write(c)
	}
	return scanResult{input: in.digest(), output: out.digest()}, nil
}

// scanPiece is one chunk of the data section in flight between the two scan goroutines.
type scanPiece struct {
	buf []byte
	off int64 // offset in the data section
}

// scanParallel is scanSequential on two goroutines: this one reads each chunk and hashes it
// as it is, then hands it to the other, which patches it in place and hashes the result.
// scanBuffers chunks circulate between them, so memory stays bounded.
func scanParallel(p *Patch, l targetLayout, target io.ReaderAt, size int64, kind digestKind, chunk int64) (scanResult, error) {
	in, out := kind.newHasher(), kind.newHasher()
	free := make(chan []byte, scanBuffers)
	full := make(chan scanPiece, scanBuffers) // never blocks: at most scanBuffers pieces exist
	for range scanBuffers {
		free <- make([]byte, chunk)
	}
	failed := make(chan struct{}) // closed by the patching goroutine when it fails
	var patchErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		patcher := newChunkPatcher(p, l.tensors)
		out.Write(l.outPrefix())
		for pc := range full {
			if patchErr == nil {
				if patchErr = patcher.patch(pc.buf, pc.off); patchErr != nil {
					close(failed)
				} else {
					out.Write(pc.buf)
				}
			}
			free <- pc.buf[:cap(pc.buf)]
		}
	})
	var readErr error
	in.Write(l.prefix)
	dataLen := size - l.dataStart
read:
	for off := int64(0); off < dataLen; off += chunk {
		var buf []byte
		select {
		case buf = <-free:
		case <-failed:
			break read
		}
		c := buf[:min(chunk, dataLen-off)]
		if err := readFull(target, c, l.dataStart+off); err != nil {
			readErr = fmt.Errorf("read at %d: %w", l.dataStart+off, err)
			break
		}
		in.Write(c)
		full <- scanPiece{buf: c, off: off}
	}
	close(full)
	wg.Wait()
	if readErr != nil {
		return scanResult{}, readErr
	}
	if patchErr != nil {
		return scanResult{}, patchErr
	}
	return scanResult{input: in.digest(), output: out.digest()}, nil
}

// scanMapped hashes a mapped target on two goroutines: one hashes the file as it is,
// straight from the mapping; the other copies each piece out of the mapping, patches it and
// hashes it while it is still in the core's cache (pieces of mappedChunk: handing pieces
// between goroutines, or larger pieces, measured slower). The input is hashed in pieces too,
// not in one call of xxh3's one-shot form: that call runs in assembly for ~70 ms per GiB,
// and a garbage collection that must stop it would hold the other core spinning meanwhile.
// A memory fault on the mapping (the file shrank under us) becomes an error.
func scanMapped(p *Patch, l targetLayout, data []byte, kind digestKind, needInput bool, chunk int64) (res scanResult, err error) {
	// Everything is allocated before the goroutine starts, so that no collection has to stop
	// it (patchCursor buffers are recycled for the same reason).
	out := kind.newHasher()
	buf := make([]byte, chunk)
	var wg sync.WaitGroup
	var inErr error
	if needInput {
		in := kind.newHasher()
		wg.Go(func() {
			defer faultToError(&inErr)
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			for off := int64(0); off < int64(len(data)); off += chunk {
				in.Write(data[off:min(off+chunk, int64(len(data)))])
			}
			res.input = in.digest()
		})
	}
	out.Write(l.outPrefix())
	err = patchMapped(p, l, data, buf, out)
	wg.Wait()
	if err == nil {
		err = inErr
	}
	if err != nil {
		return scanResult{}, err
	}
	res.output = out.digest()
	return res, nil
}

// patchMapped copies the data section out of the mapping a buffer at a time, patches it and
// hashes it into out.
func patchMapped(p *Patch, l targetLayout, data, buf []byte, out io.Writer) (err error) {
	defer faultToError(&err)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	patcher := newChunkPatcher(p, l.tensors)
	section := data[l.dataStart:]
	for off := int64(0); off < int64(len(section)); off += int64(len(buf)) {
		c := buf[:copy(buf, section[off:])]
		if err := patcher.patch(c, off); err != nil {
			return err
		}
		out.Write(c)
	}
	return nil
}

// faultToError turns a memory fault on a mapping (SIGBUS when the file was truncated under
// us) into an error; call it deferred in a goroutine that reads or writes a mapping.
func faultToError(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("memory fault on the mapping of the target (was the file truncated?): %v", r)
	}
}

// chunkPatcher applies a file's changes to consecutive chunks of its data section.
type chunkPatcher struct {
	tensors []appliedTensor
	cursors []*patchCursor
	front   int            // first tensor that may still have changes to apply
	spare   []*patchCursor // finished cursors whose buffers the next ones reuse
}

func newChunkPatcher(p *Patch, tensors []appliedTensor) *chunkPatcher {
	cp := &chunkPatcher{tensors: tensors, cursors: make([]*patchCursor, len(tensors))}
	for i, t := range tensors {
		cp.cursors[i] = p.newCursor(t.plan)
	}
	return cp
}

// seek makes the patcher start at data section offset off: the changes of elements that end
// at or before it are read past (their indices checked as patch does), so that the next chunk
// may start at off.
func (cp *chunkPatcher) seek(off int64) error {
	for cp.front < len(cp.tensors) && cp.tensors[cp.front].target.End <= off {
		cp.front++
	}
	for i := cp.front; i < len(cp.tensors) && cp.tensors[i].target.Begin < off; i++ {
		c, begin := cp.cursors[i], cp.tensors[i].target.Begin
		for {
			if c.pos == c.n {
				if c.left == 0 {
					break
				}
				if err := c.fill(); err != nil {
					return err
				}
			}
			idx, err := c.index()
			if err != nil {
				return err
			}
			if begin+(idx+1)*int64(c.width) > off {
				break
			}
			c.last = idx
			c.pos++
		}
	}
	return nil
}

// patch writes into chunk, the data section bytes [off, off+len(chunk)), every change that
// falls in it. Chunks must come in order.
func (cp *chunkPatcher) patch(chunk []byte, off int64) error {
	end := off + int64(len(chunk))
	for i := cp.front; i < len(cp.tensors) && cp.tensors[i].target.Begin < end; i++ {
		c := cp.cursors[i]
		if c.idx == nil && len(cp.spare) > 0 {
			c.reuse(cp.spare[len(cp.spare)-1])
			cp.spare = cp.spare[:len(cp.spare)-1]
		}
		done, err := patchChunk(c, cp.tensors[i].target.Begin, chunk, off)
		if err != nil {
			return err
		}
		if done && i == cp.front {
			cp.front++
			cp.spare = append(cp.spare, c)
		}
	}
	return nil
}

// patchChunk writes into chunk (the data section bytes [off, off+len(chunk))) every change
// of the cursor's tensor (whose data starts at data offset begin) that overlaps it. An element
// cut by the chunk's end is written in part and kept for the next chunk. done reports that
// the cursor has no changes left. It works on the cursor's batch directly: this loop runs
// once per changed element of the file.
func patchChunk(c *patchCursor, begin int64, chunk []byte, off int64) (done bool, err error) {
	end := off + int64(len(chunk))
	width := int64(c.width)
	for {
		if c.pos == c.n {
			if c.left == 0 {
				return true, nil
			}
			if err := c.fill(); err != nil {
				return false, err
			}
		}
		for ; c.pos < c.n; c.pos++ {
			idx, err := c.index()
			if err != nil {
				return false, err
			}
			at := begin + idx*width
			if at >= end {
				return false, nil
			}
			val := c.val[c.pos*c.width : (c.pos+1)*c.width]
			if at >= off && at+width <= end {
				if width == 2 { // bf16 and f16, nearly every change: no call to memmove
					dst := chunk[at-off : at-off+2]
					dst[0], dst[1] = val[0], val[1]
				} else {
					copy(chunk[at-off:], val)
				}
			} else {
				lo, hi := max(at, off), min(at+width, end)
				copy(chunk[lo-off:hi-off], val[lo-at:hi-at])
				if at+width > end {
					return false, nil
				}
			}
			c.last = idx
		}
	}
}
