package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
)

// Export writes version v as plain files under dir (created if missing). Every file is
// written to a temporary name, checked against the SHA-256 in the manifest, and only then
// renamed into place: a damaged object makes Export fail naming the file and the object, and
// never leaves a wrong file behind. Files that can be verified are still written; the error
// lists those that could not. progress (nil: none) gets the bytes done of the version's total.
func (s *Store) Export(v uint64, dir string, progress func(done, total int64)) error {
	return s.checker.export(v, dir, progress)
}

// export is Export.
func (c *checker) export(v uint64, dir string, progress func(done, total int64)) error {
	s := c.st
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("export version %d: %w", v, err)
	}
	for _, d := range ver.m.Dirs {
		if err := mkdirAllIn(dir, d.Path, fileMode(d.Mode)|0o700); err != nil {
			return fmt.Errorf("export version %d: %w", v, err)
		}
	}
	var total, done int64
	for i := range ver.m.Files {
		total += ver.m.Files[i].Size
	}
	var errs []error
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		count := func(n int64) {
			done += n
			if progress != nil {
				progress(done, total)
			}
		}
		if err := c.exportFile(ver, f, dir, count); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("export version %d: %w", v, errors.Join(errs...))
	}
	return nil
}

// exportFile writes f below dir by its version-relative path (reldir.go: any path a version
// holds, however far it takes dir past PATH_MAX).
func (c *checker) exportFile(ver *version, f *manifestFile, dir string, count func(int64)) error {
	if err := mkdirAllIn(dir, path.Dir(f.Path), 0o755); err != nil {
		return err
	}
	tmp, err := c.writeVerified(ver, f, dir, path.Dir(f.Path), readOpts{}, count)
	if errors.Is(err, errHashMismatch) {
		// The materialized copy or a cached page may be what is wrong: once more from the
		// store's objects alone, naming the object whose content does not hash to its name.
		tmp, err = c.writeVerified(ver, f, dir, path.Dir(f.Path), readOpts{noMaterialized: true, pages: newPageCache(0)}, nil)
		if errors.Is(err, errHashMismatch) {
			err = c.findBadObject(ver, f, err)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	if err := renameIn(dir, tmp, f.Path); err != nil {
		removeIn(dir, tmp)
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	return nil
}

var errHashMismatch = fmt.Errorf("content does not match its SHA-256: %w", ErrCorrupt)

// writeVerified writes file f of ver to a temporary file in relDir below dir and returns its
// path relative to dir if its SHA-256 matches the manifest; otherwise it removes it.
func (c *checker) writeVerified(ver *version, f *manifestFile, dir, relDir string, opts readOpts, count func(int64)) (string, error) {
	s := c.st
	out, tmp, err := createTempIn(dir, relDir, ".weightfs-export-")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			out.Close()
			removeIn(dir, tmp)
		}
	}()
	vf := s.newVersionFile(ver, f, opts)
	h := sha256.New()
	buf := make([]byte, ingestChunk)
	for off := int64(0); off < f.Size; {
		n, err := vf.ReadAt(buf[:min(int64(len(buf)), f.Size-off)], off)
		if err != nil && !(errors.Is(err, io.EOF) && off+int64(n) == f.Size) {
			return "", err
		}
		if n == 0 { // no error, no byte: stop rather than spin
			return "", fmt.Errorf("read %s at %d: no bytes: %w", f.Path, off, ErrCorrupt)
		}
		h.Write(buf[:n])
		if _, err := out.Write(buf[:n]); err != nil {
			return "", err
		}
		off += int64(n)
		if count != nil {
			count(int64(n))
		}
	}
	var got ID
	h.Sum(got[:0])
	if got != f.SHA256 {
		return "", errHashMismatch
	}
	if err := out.Chmod(fileMode(f.Mode)); err != nil {
		return "", err
	}
	if err := out.Close(); err != nil {
		return "", err
	}
	ok = true
	return tmp, nil
}

// findBadObject re-reads each object of f from the store and names the first whose content
// does not hash to its identity.
func (c *checker) findBadObject(ver *version, f *manifestFile, cause error) error {
	s := c.st
	vf := s.newVersionFile(ver, f, readOpts{noMaterialized: true, pages: newPageCache(0)})
	for _, sg := range vf.segs {
		got, err := c.hashObject(sg.id, sg.hint, sg.end-sg.start, vf.opts)
		if err != nil {
			return err
		}
		if got != sg.id {
			return objectError(sg.id, fmt.Errorf("content hashes to %s: %w", got, ErrCorrupt))
		}
	}
	return fmt.Errorf("file hash differs from the manifest although every object checks: %w", cause)
}

// hashObject reconstructs object id (size content bytes) and returns its SHA-256.
func (c *checker) hashObject(id ID, hint objHint, size int64, opts readOpts) (ID, error) {
	s := c.st
	h := sha256.New()
	buf := make([]byte, min(size, ingestChunk))
	for off := int64(0); off < size; {
		n := min(int64(len(buf)), size-off)
		if err := s.objects.readObject(id, hint, off, buf[:n], opts); err != nil {
			return ID{}, err
		}
		h.Write(buf[:n])
		off += n
	}
	var got ID
	h.Sum(got[:0])
	return got, nil
}
