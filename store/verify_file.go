package store

import (
	"crypto/sha256"
	"fmt"
	"hash"

	"github.com/zeebo/xxh3"
)

// Verify's reconstruction of one file of a version, from the store's objects alone: each
// object's SHA-256, each tensor's xxh3-128 where its manifest keeps one, and the file's
// SHA-256.

// wholeBufs are verifyFile's buffers for the small full objects it reads whole (a record and
// its content: object_whole.go), reused from one object to the next.
type wholeBufs struct{ rec, content []byte }

// verifyFile reconstructs one file, checking each object's and the file's SHA-256. Objects
// whose content checked out are added to checked. A small full object, or a delta on one, is
// read whole (readWhole) rather than page by page through the read path's page cache.
func (c *checker) verifyFile(ver *version, f *manifestFile, opts readOpts, checked map[ID]bool, bufs *wholeBufs) (int64, error) {
	s := c.st
	vf := s.newVersionFile(ver, f, opts)
	fileHash := sha256.New()
	var objHash hash.Hash = sha256.New()
	tensorHash := xxh3.New128()
	var done int64
	for _, sg := range vf.segs {
		objHash.Reset()
		tensorHash.Reset()
		// Where the manifest keeps the tensor's xxh3-128, reads check that (read_check.go):
		// Verify checks it too, so that a wrong digest is found here and not by a reader.
		byXXH3 := !sg.hint.xxh.IsZero()
		hashes := func(b []byte) {
			objHash.Write(b)
			if byXXH3 {
				tensorHash.Write(b)
			}
		}
		size := sg.end - sg.start
		content, rec, cbuf, whole := s.objects.readWhole(sg.id, bufs.rec, bufs.content)
		bufs.rec, bufs.content = rec, cbuf
		if whole && int64(len(content)) == size {
			hashes(content)
			fileHash.Write(content)
			done += size
			size = 0 // read
		}
		var buf []byte
		if size > 0 {
			buf = make([]byte, min(size, pageSize))
		}
		for off := int64(0); off < size; {
			n := min(int64(len(buf)), size-off)
			if err := s.objects.readObject(sg.id, sg.hint, off, buf[:n], opts); err != nil {
				return done, err
			}
			hashes(buf[:n])
			fileHash.Write(buf[:n])
			off += n
			done += n
		}
		var got ID
		objHash.Sum(got[:0])
		if got != sg.id {
			return done, objectError(sg.id, fmt.Errorf("content hashes to %s: %w", got, ErrCorrupt))
		}
		if byXXH3 {
			if sum := xxh3Digest(tensorHash.Sum128().Bytes()); sum != sg.hint.xxh {
				return done, fmt.Errorf("%s: its bytes (object %s, which checks) have xxh3-128 %s, its manifest says %s: %w",
					describeObject(sg.hint), sg.id, sum, sg.hint.xxh, ErrCorrupt)
			}
		}
		checked[sg.id] = true
	}
	var got ID
	fileHash.Sum(got[:0])
	if got != f.SHA256 {
		return done, fmt.Errorf("file hashes to %s, manifest says %s: %w", got, f.SHA256, ErrCorrupt)
	}
	return done, nil
}
