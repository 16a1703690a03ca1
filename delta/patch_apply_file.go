package delta

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// The file-system side of weightfs apply: the journal as a file, and ApplyPatchFile, which the
// CLI calls. The rest of the package works on io.ReaderAt/io.WriterAt only.

// JournalSuffix is appended to a target's path to name its apply journal.
const JournalSuffix = ".weightfs-apply"

// ApplyPatchFile applies the patch file at patchPath to the local file at target with the
// default ApplyOptions. Its path in the version is its base name, or the one file of the
// patch whose path ends in /base name. A sparsely patched safetensors file is changed in
// place under the journal target+JournalSuffix (see ApplyPatch); a file the patch carries
// whole is checked against its base hash and replaced atomically (temporary file, rename).
func ApplyPatchFile(patchPath, target string) (ApplyResult, error) {
	return ApplyPatchFileWith(patchPath, target, ApplyOptions{})
}

// ApplyPatchFileWith is ApplyPatchFile with options. With opts.Sync the journal, the target
// and a replaced whole file are fsynced (with their directory) at every step; without it
// nothing is, which is safe against a killed process but not against power loss.
func ApplyPatchFileWith(patchPath, target string, opts ApplyOptions) (ApplyResult, error) {
	return applyPatchFile(patchPath, target, applyConfig{chunk: scanChunk, opts: opts})
}

func applyPatchFile(patchPath, target string, cfg applyConfig) (ApplyResult, error) {
	opts := cfg.opts
	pf, err := os.Open(patchPath)
	if err != nil {
		return ApplyResult{}, err
	}
	defer pf.Close()
	st, err := pf.Stat()
	if err != nil {
		return ApplyResult{}, err
	}
	p, err := OpenPatch(pf, st.Size())
	if err != nil {
		return ApplyResult{}, err
	}
	name := patchFileName(p, filepath.Base(target))
	if f, ok := p.File(name); ok && f.Whole {
		return replaceWholeFile(p, f, target, opts)
	}
	tf, err := os.OpenFile(target, os.O_RDWR, 0)
	if err != nil {
		return ApplyResult{}, err
	}
	defer tf.Close()
	tst, err := tf.Stat()
	if err != nil {
		return ApplyResult{}, err
	}
	journal := fileJournal{path: target + JournalSuffix, sync: opts.Sync}
	res, err := applyPatch(p, tf, tst.Size(), name, journal, cfg)
	if cerr := tf.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", target, cerr)
	}
	return res, err
}

// patchFileName maps a local file's base name to the patch's path for it.
func patchFileName(p *Patch, base string) string {
	if _, ok := p.File(base); ok {
		return base
	}
	match := ""
	for _, f := range p.Plan.Files {
		if strings.HasSuffix(f.Name, "/"+base) {
			if match != "" {
				return base // ambiguous: let ApplyPatch report that the patch has no such file
			}
			match = f.Name
		}
	}
	if match == "" {
		return base
	}
	return match
}

// replaceWholeFile writes the new bytes of a file carried whole, after checking that the
// file on disk is the patch's base (or missing, when the file is new) or already the result.
// The bytes are streamed to a temporary file and hashed on the way; only a copy that hashes
// to the recorded result is renamed over the target.
func replaceWholeFile(p *Patch, f PatchFile, target string, opts ApplyOptions) (ApplyResult, error) {
	kind := chooseDigest(f, opts)
	res := ApplyResult{File: f.Name, ModelVersion: p.Plan.ModelVersion, BaseVersion: p.Plan.BaseVersion, Hash: kind.String(), Synced: opts.Sync}
	base, result := kind.want(f)
	have, err := hashFile(target, kind)
	switch {
	case errors.Is(err, os.ErrNotExist) && f.BaseSHA256 == ([32]byte{}):
	case err != nil:
		return res, err
	case have == result:
		res.AlreadyApplied = true
		return res, nil
	case f.BaseSHA256 == ([32]byte{}) || have != base:
		return res, fmt.Errorf("%w: %s has %s %s, which is neither the patch's base %s nor its result %s; nothing was written",
			ErrBaseMismatch, f.Name, kind, have, base, result)
	}
	r, err := p.WholeFile(f.Name)
	if err != nil {
		return res, err
	}
	tmp := target + ".weightfs-tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return res, err
	}
	h := kind.newHasher()
	n, err := io.Copy(io.MultiWriter(h, out), r)
	if err == nil && h.digest() != result {
		err = fmt.Errorf("%w: the patch's copy of %s does not hash to its recorded result", ErrMalformed, f.Name)
	}
	if err == nil && opts.Sync {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, target)
	}
	if err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("replace %s: %w", target, err)
	}
	res.ElementsWritten, res.Writes, res.Method = n, 1, MethodPwrite
	if !opts.Sync {
		return res, nil
	}
	return res, syncDir(filepath.Dir(target))
}

func hashFile(path string, kind digestKind) (digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return digest{}, err
	}
	defer f.Close()
	h := kind.newHasher()
	if _, err := io.Copy(h, f); err != nil {
		return digest{}, fmt.Errorf("read %s: %w", path, err)
	}
	return h.digest(), nil
}

// FileJournal is a Journal kept in the file at this path, durably: written to a temporary
// file, synced, renamed into place, and the directory synced (what ApplyOptions.Sync uses).
type FileJournal string

// Load reads the journal file.
func (j FileJournal) Load() ([]byte, bool, error) { return fileJournal{path: string(j)}.Load() }

// Store writes the journal file durably.
func (j FileJournal) Store(record []byte) error {
	return fileJournal{path: string(j), sync: true}.Store(record)
}

// Remove deletes the journal file and syncs its directory.
func (j FileJournal) Remove() error { return fileJournal{path: string(j), sync: true}.Remove() }

// fileJournal is the journal file, synced or not. Unsynced it still survives a killed
// process: the rename and unlink are atomic and the page cache keeps the bytes.
type fileJournal struct {
	path string
	sync bool
}

func (j fileJournal) Load() ([]byte, bool, error) {
	b, err := os.ReadFile(j.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read apply journal: %w", err)
	}
	return b, true, nil
}

func (j fileJournal) Store(record []byte) error {
	tmp := j.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("create apply journal: %w", err)
	}
	_, err = f.Write(record)
	if err == nil && j.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, j.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write apply journal %s: %w", j.path, err)
	}
	if !j.sync {
		return nil
	}
	return syncDir(filepath.Dir(j.path))
}

func (j fileJournal) Remove() error {
	if err := os.Remove(j.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove apply journal: %w", err)
	}
	if !j.sync {
		return nil
	}
	return syncDir(filepath.Dir(j.path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
