package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"sync/atomic"
)

// objStream writes a full object whose content arrives in order, for the streaming ingest
// path. It produces exactly the file fullWriter produces for the same content (same frames,
// table, header, link and CRC: a test compares them), with two differences that streaming
// needs:
//
//   - The content length may be unknown until the end (a file that is not safetensors). Then
//     the frames go to a spill file and are copied behind the header and chunk table at the
//     end, since the table's size depends on the chunk count. A content that ends within the
//     first chunk never touches the spill file.
//   - Nothing received is ever lost: after a failed write (a full disk) the bytes stay in
//     memory, and readAt returns every byte received so far, from the frames written and the
//     bytes not yet compressed. A stream that must give up uses it to hand its bytes back.
//
// A small object (content known up front, at most streamMemObject bytes; or unknown and
// ending within its first chunk) is built in memory and handed to the pack layer whole
// (putObjectBytes, as the batch path does): no temporary file, no write and read back per
// object, which for a checkpoint of thousands of small tensors (a mixture of experts) was
// most of the stream path's per-tensor cost. The stored bytes are the same.
//
// Not safe for concurrent use.
type objStream struct {
	s     *Store
	width int
	known bool  // the content length was given up front
	clen  int64 // the content length when known

	f        *os.File // known: the object's temporary file; unknown: the spill file (lazily)
	mem      []byte   // a small object's file in memory (instead of f): frames from frameOff
	inMem    bool     // the object file is built in mem
	frameOff int64    // file offset of the first frame in f
	sizes    []uint32
	starts   []int64 // file offset of every frame, for reads back
	pos      int64   // file offset of the next frame

	pending []byte // content not yet compressed; more than a chunk only after a failure
	scratch []byte
	frame   []byte

	received  int64
	framesCRC uint32 // CRC-32C of the frames, in order
	framesLen int64
	sha       hash.Hash // nil when the caller hashes the content itself
	err       error     // the first failure; later writes only keep their bytes
}

// newObjStream starts a full object of elements of width bytes; contentLen < 0 means unknown.
// With hashed set the stream computes the content's SHA-256 itself.
func newObjStream(s *Store, width int, contentLen int64, hashed bool) (*objStream, error) {
	if contentLen >= 0 && contentLen%int64(width) != 0 {
		return nil, fmt.Errorf("full object of %d bytes at width %d", contentLen, width)
	}
	o := &objStream{s: s, width: width, known: contentLen >= 0, clen: contentLen}
	if hashed {
		o.sha = sha256.New()
	}
	if o.known && contentLen <= streamMemObject {
		o.inMem = true
		o.frameOff = objectHeaderLen + chunkTableLen(chunkCount(contentLen, fullChunkSize))
		o.mem = make([]byte, o.frameOff, o.frameOff+contentLen/2)
		o.pos = o.frameOff
	} else if o.known {
		objStreamTemps.Add(1)
		f, err := s.be.CreateTemp()
		if err != nil {
			return nil, err
		}
		o.f = f
		o.frameOff = objectHeaderLen + chunkTableLen(chunkCount(contentLen, fullChunkSize))
		o.pos = o.frameOff
	}
	return o, nil
}

// write adds content bytes. On an error the bytes are kept (readAt still returns them) and
// every later write fails with the same error.
func (o *objStream) write(p []byte) error {
	if o.known && o.received+int64(len(p)) > o.clen {
		return fmt.Errorf("full object: %d content bytes, more than the %d announced", o.received+int64(len(p)), o.clen)
	}
	o.received += int64(len(p))
	if o.sha != nil {
		o.sha.Write(p)
	}
	if o.err != nil {
		o.pending = append(o.pending, p...)
		return o.err
	}
	for len(p) > 0 {
		if len(o.pending) == 0 && len(p) >= fullChunkSize {
			// A whole chunk straight from the caller's buffer, no copy.
			if err := o.emit(p[:fullChunkSize]); err != nil {
				o.pending = append(o.pending, p...)
				return err
			}
			p = p[fullChunkSize:]
			continue
		}
		take := min(len(p), fullChunkSize-len(o.pending))
		o.pending = append(o.pending, p[:take]...)
		p = p[take:]
		if len(o.pending) == fullChunkSize {
			if err := o.emit(o.pending); err != nil {
				o.pending = append(o.pending, p...)
				return err
			}
			o.pending = o.pending[:0]
		}
	}
	return nil
}

// emit compresses one chunk and writes its frame; a failure is sticky.
func (o *objStream) emit(chunk []byte) error {
	if o.f == nil && !o.inMem {
		objStreamTemps.Add(1)
		f, err := o.s.be.CreateTemp()
		if err != nil {
			o.err = err
			return err
		}
		o.f = f
	}
	if cap(o.scratch) < len(chunk) {
		// As large as the chunk, not a full chunk: a MoE version's thousands of 50 kB
		// tensors each zeroed a full chunk here (17% of the MoE mount daemon's CPU over
		// versions 1 and 2 in a profile of figure moe -quick, 2026-11-28).
		o.scratch = make([]byte, len(chunk))
	}
	o.frame = o.s.codec.compressChunk(o.frame[:0], chunk, o.scratch, o.width)
	if o.inMem {
		o.mem = append(o.mem, o.frame...) // len(o.mem) == o.pos
	} else if _, err := o.f.WriteAt(o.frame, o.pos); err != nil {
		o.err = fmt.Errorf("write object chunk: %w", err)
		return o.err
	}
	o.starts = append(o.starts, o.pos)
	o.sizes = append(o.sizes, uint32(len(o.frame)))
	o.pos += int64(len(o.frame))
	o.framesCRC = crc32.Update(o.framesCRC, castagnoli, o.frame)
	o.framesLen += int64(len(o.frame))
	return nil
}

// usable reports whether readAt can still read everything received (not after finish).
func (o *objStream) usable() bool { return o.f != nil || o.inMem || len(o.sizes) == 0 }

// readAt reads content bytes [off, off+len(p)) of what was received so far.
func (o *objStream) readAt(p []byte, off int64) error {
	if !o.usable() {
		return fmt.Errorf("read back a finished object: %w", errStreamCopy)
	}
	if off < 0 || off+int64(len(p)) > o.received {
		return fmt.Errorf("read of [%d, %d) beyond the %d bytes received", off, off+int64(len(p)), o.received)
	}
	inFrames := int64(len(o.sizes)) * fullChunkSize
	var chunk, scratch, frame []byte
	for len(p) > 0 {
		if off >= inFrames {
			n := copy(p, o.pending[off-inFrames:])
			p, off = p[n:], off+int64(n)
			continue
		}
		i := off / fullChunkSize
		if chunk == nil {
			chunk = make([]byte, fullChunkSize)
		}
		var src []byte
		if o.inMem {
			src = o.mem[o.starts[i] : o.starts[i]+int64(o.sizes[i])] // in memory: no copy
		} else {
			frame = append(frame[:0], make([]byte, o.sizes[i])...)
			if err := readFull(o.f, frame, o.starts[i]); err != nil {
				return fmt.Errorf("read back object chunk %d: %w", i, err)
			}
			src = frame
		}
		var err error
		if scratch, err = o.s.codec.decompressChunk(chunk, src, scratch, o.width); err != nil {
			return fmt.Errorf("read back object chunk %d: %w", i, err)
		}
		n := copy(p, chunk[off-i*fullChunkSize:])
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// sum is the SHA-256 of the content received (only for a stream that hashes).
func (o *objStream) sum() ID {
	var id ID
	o.sha.Sum(id[:0])
	return id
}

// finish completes the object file as the object id with an optional link delta from base,
// puts it into the store and returns its stored size.
func (o *objStream) finish(id, base ID, link []byte) (int64, error) {
	if o.err != nil {
		return 0, o.err
	}
	if o.known && o.received != o.clen {
		return 0, fmt.Errorf("full object: got %d content bytes, announced %d", o.received, o.clen)
	}
	if !o.known && o.f == nil {
		// Nothing spilled: the content (one chunk at most) is built in memory.
		o.inMem, o.known, o.clen = true, true, o.received
		o.frameOff = objectHeaderLen + chunkTableLen(chunkCount(o.received, fullChunkSize))
		o.mem = make([]byte, o.frameOff, o.frameOff+o.received)
		o.pos = o.frameOff
	}
	if len(o.pending) > 0 {
		if err := o.emit(o.pending); err != nil {
			return 0, err
		}
		o.pending = o.pending[:0]
	}
	if !o.known {
		if _, err := o.copySpill(); err != nil {
			return 0, err
		}
	}
	if o.inMem {
		return o.finishInMemory(id, base, link)
	}
	out := o.f
	pos := o.frameOff + o.framesLen
	streamCRC, streamLen := o.framesCRC, o.framesLen
	if len(link) > 0 {
		if _, err := out.WriteAt(link, pos); err != nil {
			return 0, fmt.Errorf("write object link: %w", err)
		}
		pos += int64(len(link))
		streamCRC = crc32.Update(streamCRC, castagnoli, link)
		streamLen += int64(len(link))
	} else {
		base = ID{}
	}
	table := encodeChunkTable(fullChunkSize, o.sizes)
	h := objectHeader{Kind: kindFull, Width: o.width, ID: id, ContentLen: o.received, Base: base,
		FullLen: int64(len(table)) + o.framesLen, DeltaLen: int64(len(link))}
	front := append(h.Encode(), table...)
	if _, err := out.WriteAt(front, 0); err != nil {
		return 0, fmt.Errorf("write object header: %w", err)
	}
	var trailer [objectTrailerLen]byte
	putUint32LE(trailer[:], crc32Combine(crc32c(front), streamCRC, streamLen))
	if _, err := out.WriteAt(trailer[:], pos); err != nil {
		return 0, fmt.Errorf("write object checksum: %w", err)
	}
	o.f = nil
	if err := o.s.be.PutObject(id, out); err != nil {
		return 0, err
	}
	return pos + objectTrailerLen, nil
}

// finishInMemory completes a small object built in memory: the same bytes finish writes into
// a temporary file, handed to the pack layer whole.
func (o *objStream) finishInMemory(id, base ID, link []byte) (int64, error) {
	if len(link) == 0 {
		base = ID{}
	}
	table := encodeChunkTable(fullChunkSize, o.sizes)
	h := objectHeader{Kind: kindFull, Width: o.width, ID: id, ContentLen: o.received, Base: base,
		FullLen: int64(len(table)) + o.framesLen, DeltaLen: int64(len(link))}
	front := append(h.Encode(), table...)
	if int64(len(front)) != o.frameOff {
		return 0, fmt.Errorf("object header of %d bytes, %d reserved", len(front), o.frameOff)
	}
	file := append(o.mem, link...)
	copy(file, front)
	streamCRC := crc32.Update(o.framesCRC, castagnoli, link)
	var trailer [objectTrailerLen]byte
	putUint32LE(trailer[:], crc32Combine(crc32c(front), streamCRC, o.framesLen+int64(len(link))))
	file = append(file, trailer[:]...)
	o.mem, o.inMem = nil, false
	if err := putObjectBytes(o.s.be, id, file); err != nil {
		return 0, err
	}
	return int64(len(file)), nil
}

// copySpill writes the frames of the spill file behind a header and chunk table in a new
// temporary file (the kernel copies: copy_file_range), which becomes o.f; the spill file is
// removed.
func (o *objStream) copySpill() (*os.File, error) {
	objStreamTemps.Add(1)
	out, err := o.s.be.CreateTemp()
	if err != nil {
		return nil, err
	}
	frameOff := objectHeaderLen + chunkTableLen(int64(len(o.sizes)))
	_, err = out.Seek(frameOff, io.SeekStart)
	if err == nil {
		_, err = o.f.Seek(0, io.SeekStart)
	}
	if err == nil {
		var n int64
		n, err = io.Copy(out, io.LimitReader(o.f, o.framesLen))
		if err == nil && n != o.framesLen {
			err = fmt.Errorf("spill file holds %d of %d frame bytes", n, o.framesLen)
		}
	}
	if err != nil {
		o.s.be.RemoveTemp(out)
		return nil, fmt.Errorf("copy object frames: %w", err)
	}
	o.s.be.RemoveTemp(o.f)
	o.f = out
	o.frameOff = frameOff
	return out, nil
}

// abort drops the temporary file (a no-op after finish).
func (o *objStream) abort() {
	if o != nil {
		o.mem, o.inMem = nil, false
	}
	if o != nil && o.f != nil {
		o.s.be.RemoveTemp(o.f)
		o.f = nil
	}
}

// streamMemObject bounds the content of an object a stream builds in memory rather than in a
// temporary file. At most a few tensors of a stream are open at once (the worker's, the
// finisher's queue), so the memory stays a few times this.
var streamMemObject int64 = 4 << 20 // a var: a test sets 0 to take the file path

// objStreamTemps counts the temporary files objStreams created (a test reads it).
var objStreamTemps atomic.Int64

// errStreamCopy is returned by reads of a stream's bytes that cannot be reconstructed.
var errStreamCopy = errors.New("cannot reconstruct the bytes written so far")
