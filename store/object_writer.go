package store

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
)

// fullWriter streams the content of a full object into a temporary file (or, for a content
// of at most fullInMemory bytes, a buffer that goes into the store's open pack without a
// file of its own: putObjectBytes): 1 MiB chunks,
// shuffled and compressed as they fill, hashed (SHA-256) as they come. The header and the
// chunk table, which depend on the hash and the frame sizes, are written last at the front;
// the CRC of the whole file is combined from the CRC of the front and of the streamed part,
// so nothing is read back. Not safe for concurrent use.
type fullWriter struct {
	be    Backend
	codec *codec
	f     *os.File   // the temporary file; nil when the object is built in memory
	mem   *memWriter // the object in memory; nil when it is built in f
	out   io.WriterAt

	width      int
	contentLen int64
	sha        hash.Hash

	pending []byte // content not yet compressed (< one chunk)
	scratch []byte
	frame   []byte
	sizes   []uint32

	received  int64  // content bytes written so far
	pos       int64  // file offset of the next frame
	streamCRC uint32 // CRC-32C of the file from the first frame on
	streamLen int64
}

// newFullWriter starts a full object of contentLen bytes of elements of width bytes.
func newFullWriter(be Backend, c *codec, width int, contentLen int64) (*fullWriter, error) {
	if contentLen < 0 || contentLen%int64(width) != 0 {
		return nil, fmt.Errorf("full object of %d bytes at width %d", contentLen, width)
	}
	n := chunkCount(contentLen, fullChunkSize)
	w := &fullWriter{
		be: be, codec: c, width: width, contentLen: contentLen, sha: sha256.New(),
		pending: make([]byte, 0, min(contentLen, fullChunkSize)),
		scratch: make([]byte, min(contentLen, fullChunkSize)),
		sizes:   make([]uint32, 0, n),
		pos:     objectHeaderLen + chunkTableLen(n),
	}
	if contentLen <= fullInMemory {
		w.mem = &memWriter{}
		w.out = w.mem
		return w, nil
	}
	f, err := be.CreateTemp()
	if err != nil {
		return nil, err
	}
	w.f, w.out = f, f
	return w, nil
}

// fullInMemory is the largest content fullWriter builds in memory: its object file is a few
// MiB at most, and goes into the open pack without a temporary file.
const fullInMemory = 4 << 20

// memWriter is a file built in memory by writes at offsets.
type memWriter struct{ b []byte }

func (m *memWriter) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

// Write adds content bytes.
func (w *fullWriter) Write(p []byte) (int, error) {
	if w.received+int64(len(p)) > w.contentLen {
		return 0, fmt.Errorf("full object: %d content bytes, more than the %d announced", w.received+int64(len(p)), w.contentLen)
	}
	w.sha.Write(p)
	w.received += int64(len(p))
	written := len(p)
	for len(p) > 0 {
		if len(w.pending) == 0 && len(p) >= fullChunkSize {
			// A whole chunk straight from the caller's buffer, no copy.
			if err := w.emit(p[:fullChunkSize]); err != nil {
				return 0, err
			}
			p = p[fullChunkSize:]
			continue
		}
		take := min(len(p), fullChunkSize-len(w.pending))
		w.pending = append(w.pending, p[:take]...)
		p = p[take:]
		if len(w.pending) == fullChunkSize {
			if err := w.emit(w.pending); err != nil {
				return 0, err
			}
			w.pending = w.pending[:0]
		}
	}
	return written, nil
}

func (w *fullWriter) emit(chunk []byte) error {
	w.frame = w.codec.compressChunk(w.frame[:0], chunk, w.scratch, w.width)
	if _, err := w.out.WriteAt(w.frame, w.pos); err != nil {
		return fmt.Errorf("write object chunk: %w", err)
	}
	w.pos += int64(len(w.frame))
	w.sizes = append(w.sizes, uint32(len(w.frame)))
	w.streamCRC = crc32.Update(w.streamCRC, castagnoli, w.frame)
	w.streamLen += int64(len(w.frame))
	return nil
}

// finish completes the file: the last chunk, the optional link delta (from base to this
// content), the header and table, the CRC. It returns the identity of the content; if want is
// not zero the content must have that identity (a second read of a source must see what the
// first saw).
func (w *fullWriter) finish(want ID, base ID, link []byte) (ID, error) {
	if len(w.pending) > 0 {
		if err := w.emit(w.pending); err != nil {
			return ID{}, err
		}
		w.pending = w.pending[:0]
	}
	if w.received != w.contentLen {
		return ID{}, fmt.Errorf("full object: got %d content bytes, announced %d", w.received, w.contentLen)
	}
	var id ID
	w.sha.Sum(id[:0])
	if !want.IsZero() && id != want {
		return id, fmt.Errorf("content changed while it was stored (sha256 %s, first read %s)", id, want)
	}
	if len(link) > 0 {
		if _, err := w.out.WriteAt(link, w.pos); err != nil {
			return id, fmt.Errorf("write object link: %w", err)
		}
		w.pos += int64(len(link))
		w.streamCRC = crc32.Update(w.streamCRC, castagnoli, link)
		w.streamLen += int64(len(link))
	} else {
		base = ID{}
	}
	table := encodeChunkTable(fullChunkSize, w.sizes)
	h := objectHeader{
		Kind: kindFull, Width: w.width, ID: id, ContentLen: w.contentLen, Base: base,
		FullLen: w.pos - objectHeaderLen - int64(len(link)), DeltaLen: int64(len(link)),
	}
	front := append(h.Encode(), table...)
	if _, err := w.out.WriteAt(front, 0); err != nil {
		return id, fmt.Errorf("write object header: %w", err)
	}
	crc := crc32Combine(crc32c(front), w.streamCRC, w.streamLen)
	var trailer [objectTrailerLen]byte
	putUint32LE(trailer[:], crc)
	if _, err := w.out.WriteAt(trailer[:], w.pos); err != nil {
		return id, fmt.Errorf("write object checksum: %w", err)
	}
	return id, nil
}

// size is the length of the finished file.
func (w *fullWriter) size() int64 { return w.pos + objectTrailerLen }

// put makes the finished file the object id.
func (w *fullWriter) put(id ID) error {
	if m := w.mem; m != nil {
		w.mem = nil
		return putObjectBytes(w.be, id, m.b)
	}
	f := w.f
	w.f = nil
	return w.be.PutObject(id, f)
}

// abort drops the temporary file (a no-op after put).
func (w *fullWriter) abort() {
	w.mem = nil
	if w.f != nil {
		w.be.RemoveTemp(w.f)
		w.f = nil
	}
}

// encodeDeltaObject returns the whole file of a delta object.
func encodeDeltaObject(id ID, width int, contentLen int64, base ID, body []byte) []byte {
	h := objectHeader{Kind: kindDelta, Width: width, ID: id, ContentLen: contentLen, Base: base, DeltaLen: int64(len(body))}
	b := make([]byte, 0, h.FileSize())
	b = append(b, h.Encode()...)
	b = append(b, body...)
	var trailer [objectTrailerLen]byte
	putUint32LE(trailer[:], crc32c(b))
	return append(b, trailer[:]...)
}

func putUint32LE(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
