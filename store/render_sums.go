package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Every byte served from a render is checked (docs/format.md Part III §5). A render's files
// have sums like the materialized copy's (copy_sums.go): the CRC-32C of each sumChunk, computed
// from the bytes as they are rendered (shards and the index as they are written; a patch,
// which is written out of order, by one pass over the file just written and synced, before
// it is installed) and kept beside the render under the same key: a delta's render.json
// lists each file's sums, a patch has vNNNNNN-KEY.sums.json. A read (RenderedFile.ReadAt)
// reads the whole chunks under it, checks them and only then copies bytes out. A chunk that
// fails, a file that is missing or short, or sums that are missing or do not fit the file,
// drop the render (it is moved aside and removed, so a reader holding one of its files open
// keeps its own) and the read fails with ErrDamagedRender: the caller renders again from the
// store, which checks what it reads against the objects.

// patchSumsSuffix names the sums of a cached patch: vNNNNNN-KEY.sums.json.
const patchSumsSuffix = ".sums.json"

// renderCheck is what a RenderedFile on disk is checked against, and how its render is dropped.
type renderCheck struct {
	r     *renders
	sums  *fileSums
	drop  string // the render: a patch file or a delta directory
	extra string // a patch's sums file, dropped with it
}

// sumsOf returns the sums of a file's bytes.
func sumsOfFile(p string) (*fileSums, error) {
	f, err := openCacheFile(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var w sumWriter
	if _, err := io.Copy(&w, f); err != nil {
		return nil, err
	}
	return w.sums(), nil
}

// newRenderCheck makes the check of a render's file from its listed size and sums; sums that
// do not fit the size are an error (the listing is damaged).
func (r *renders) newRenderCheck(name string, size int64, crcs []uint32, drop, extra string) (*renderCheck, error) {
	if size < 0 || int64(len(crcs)) != chunkCount(size, sumChunk) {
		return nil, fmt.Errorf("rendered %s: %d sums for %d bytes: %w", name, len(crcs), size, ErrDamagedRender)
	}
	return &renderCheck{r: r, sums: &fileSums{size: size, crcs: crcs}, drop: drop, extra: extra}, nil
}

// ReadAt reads len(p) bytes at off of the rendered file (f is the file opened at rf.Path), or
// fewer at its end, checking every chunk it reads against the render's sums. A failed check,
// or a file shorter than the render, drops the render and returns an error wrapping
// ErrDamagedRender; the caller renders again. A file held in memory is copied out.
func (rf RenderedFile) ReadAt(f io.ReaderAt, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: negative offset", off)
	}
	if off >= rf.Size {
		return 0, io.EOF
	}
	end := min(off+int64(len(p)), rf.Size)
	if rf.Path == "" {
		return copy(p, rf.Data[off:end]), nil
	}
	c := rf.check
	if c == nil { // never served unchecked
		return 0, fmt.Errorf("rendered %s has no sums: %w", rf.Path, ErrDamagedRender)
	}
	lo := off / sumChunk * sumChunk
	hi := min((end+sumChunk-1)/sumChunk*sumChunk, rf.Size)
	buf := p[:end-off]
	if lo != off || hi != end {
		// The usual read (page-aligned, a multiple of 64 KiB, or up to the end) is checked
		// in place; others read the whole chunks under them into a pooled buffer.
		pb := c.r.chunkBuffer()
		defer c.r.putChunkBuffer(pb)
		if int64(cap(*pb)) < hi-lo {
			*pb = make([]byte, hi-lo)
		}
		buf = (*pb)[:hi-lo]
	}
	n, err := f.ReadAt(buf, lo)
	if int64(n) < hi-lo {
		if err == nil || err == io.EOF {
			err = fmt.Errorf("%d of %d bytes at %d: the file is short", n, hi-lo, lo)
		}
		return 0, c.damaged(f, rf.Path, err)
	}
	if chunk, want, got, ok := c.sums.check(lo, buf); !ok {
		return 0, c.damaged(f, rf.Path, fmt.Errorf("chunk %d has CRC-32C %08x, rendered as %08x", chunk, got, want))
	}
	if len(buf) != int(end-off) {
		copy(p, buf[off-lo:end-lo])
	}
	return int(end - off), nil
}

// damaged logs the damage of a render's file, drops the render and returns the read's error.
// A render whose file at p is no longer the one read (f) was replaced already and stays.
func (c *renderCheck) damaged(f io.ReaderAt, p string, why error) error {
	if of, ok := f.(*os.File); ok {
		held, herr := of.Stat()
		now, nerr := os.Stat(p)
		if herr == nil && nerr == nil && !os.SameFile(held, now) {
			return fmt.Errorf("rendered %s (since replaced): %v: %w", p, why, ErrDamagedRender)
		}
	}
	// Not once per check: a handle may be given this check again for the render made in the
	// place of a dropped one (the same key, so the same sums), and that one can be damaged too.
	c.r.dropDamaged(p, why, c.drop, c.extra)
	return fmt.Errorf("rendered %s: %v: %w", p, why, ErrDamagedRender)
}

// dropRender moves a render (a file or a directory) aside under tmp/ and removes it there: its
// name is free at once for the next render, and a reader with one of its files open keeps
// reading its own (still checked) bytes. extra, if set, is removed too.
func (r *renders) dropRender(p, extra string) {
	if extra != "" {
		os.Remove(extra)
	}
	base := r.renderDir("tmp")
	if err := os.MkdirAll(base, cacheDirPerm); err == nil {
		if aside, err := os.MkdirTemp(base, fmt.Sprintf("%d-dropped-", os.Getpid())); err == nil {
			defer os.RemoveAll(aside)
			if err := os.Rename(p, filepath.Join(aside, "render")); err == nil || os.IsNotExist(err) {
				return
			}
		}
	}
	if err := os.RemoveAll(p); err != nil {
		r.log.Warn("remove damaged render", "render", p, "err", err)
	}
}

// writePatchSums writes the sums of the patch at p (the file just rendered and synced) to
// sumsPath, and returns the patch's check as installed at final.
func (r *renders) writePatchSums(p, sumsPath, final, finalSums string) (*renderCheck, error) {
	sums, err := sumsOfFile(p)
	if err != nil {
		return nil, fmt.Errorf("sum patch: %w", err)
	}
	data, err := json.Marshal([]renderedEntry{{Name: filepath.Base(final), Size: sums.size, CRC32C: sums.crcs}})
	if err != nil {
		return nil, err
	}
	if err := syncedCreate(sumsPath, data); err != nil {
		return nil, fmt.Errorf("write patch sums: %w", err)
	}
	return &renderCheck{r: r, sums: sums, drop: final, extra: finalSums}, nil
}

// loadPatchSums reads the sums of the cached patch final (size bytes).
func (r *renders) loadPatchSums(final, sumsPath string, size int64) (*renderCheck, error) {
	data, err := readCacheFile(sumsPath)
	if err != nil {
		return nil, fmt.Errorf("sums of the patch: %w", err)
	}
	var list []renderedEntry
	if err := json.Unmarshal(data, &list); err != nil || len(list) != 1 || list[0].Size != size {
		return nil, fmt.Errorf("sums of the patch %s do not describe its %d bytes (%v)", final, size, err)
	}
	return r.newRenderCheck(filepath.Base(final), size, list[0].CRC32C, final, sumsPath)
}

// renderPatchCached returns the patch render at final (a one-step or a catch-up patch of cur
// against base) if it is cached with its sums and its header checks out; else it drops what
// is there (logged, unless nothing was), renders it with write into a temporary file, checks
// it, and installs its sums and then the patch.
func (r *renders) renderPatchCached(final string, cur, base *version, write func(p string) error) (RenderedFile, error) {
	finalSums := strings.TrimSuffix(final, ".safetensors") + patchSumsSuffix
	rf, err := checkRenderedPatch(final, cur, base)
	if err == nil {
		if rf.check, err = r.loadPatchSums(final, finalSums, rf.Size); err == nil {
			r.stats.renderHits.Add(1)
			return rf, nil
		}
	}
	r.stats.renderMisses.Add(1)
	if !errors.Is(err, fs.ErrNotExist) || fileExists(final) {
		r.log.Warn("cached patch is unusable, dropped, rendering it again", "render", final, "err", err)
		r.dropRender(final, finalSums)
	}
	tmp, err := r.renderTemp()
	if err != nil {
		return RenderedFile{}, err
	}
	defer os.RemoveAll(tmp)
	p := filepath.Join(tmp, "patch.safetensors")
	if err := write(p); err != nil {
		return RenderedFile{}, err
	}
	if rf, err = checkRenderedPatch(p, cur, base); err != nil {
		r.st.mat.suspect(err)
		return RenderedFile{}, fmt.Errorf("as rendered: %w", err)
	}
	if err := r.st.cacheMkdirAll(filepath.Dir(final)); err != nil {
		return RenderedFile{}, fmt.Errorf("create render directory: %w", err)
	}
	sumsTmp := filepath.Join(tmp, "patch"+patchSumsSuffix)
	if rf.check, err = r.writePatchSums(p, sumsTmp, final, finalSums); err != nil {
		return RenderedFile{}, err
	}
	// The sums first: a patch without them is dropped and rendered again.
	if err := os.Rename(sumsTmp, finalSums); err != nil {
		return RenderedFile{}, fmt.Errorf("install patch sums: %w", err)
	}
	if err := os.Rename(p, final); err != nil {
		return RenderedFile{}, fmt.Errorf("install patch: %w", err)
	}
	rf.Path = final
	return rf, nil
}

// removePatch removes a cached patch and its sums.
func removePatch(p string) error {
	os.Remove(strings.TrimSuffix(p, ".safetensors") + patchSumsSuffix)
	return os.Remove(p)
}
