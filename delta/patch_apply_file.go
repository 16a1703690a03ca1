package delta

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The file-system side of weightfs apply: the lock, the journal as a file, the temporary
// files, and ApplyPatchFileWith, which the CLI calls. The rest of the package works on
// io.ReaderAt/io.WriterAt only.
//
// Names beside a target FILE, all in FILE's directory:
//
//	FILE.weightfs-apply.lock  the lock of FILE's applies (patch_apply_lock.go)
//	FILE.weightfs-apply       the journal of an apply in progress
//	FILE.weightfs-apply.tmp   the journal being written, renamed over the journal
//	FILE.weightfs-tmp         the new bytes of a file carried whole, renamed over FILE
//
// Only the holder of the lock uses the two temporary names, so whatever is found there is a
// leftover of a crashed apply, or was planted: it is unlinked, never opened (unlink removes
// a symbolic or hard link itself, not the file it names), and the temporary is created with
// O_CREAT|O_EXCL|O_NOFOLLOW, so that a link planted in between makes the create fail rather
// than be followed. The journal and the target are opened with O_NOFOLLOW: a target that is a
// symbolic link is refused (the message says where it points), because an apply changes the
// file it is given, and a link may lead to a file shared with other names (a Hugging Face
// cache's blobs) or to one the caller did not mean.

// JournalSuffix is appended to a target's path to name its apply journal.
const JournalSuffix = ".weightfs-apply"

// wholeTempSuffix is appended to a target's path to name the copy that replaces it.
const wholeTempSuffix = ".weightfs-tmp"

// ApplyPatchFileWith applies the patch file at patchPath to the local file at target. Its
// path in the version is its base name, or the one file of the patch whose path ends in /base
// name. A sparsely patched safetensors file is changed in place under the journal
// target+JournalSuffix (see ApplyPatchWith); a file the patch carries whole is checked against
// its base hash and replaced atomically (temporary file, rename), keeping its mode and owner.
// Either way the apply holds the lock target+LockSuffix from its first read of the target to
// its last write, so that two applies of one file run one after the other. A target that is a
// symbolic link is refused. With opts.Sync the journal, the target and a replaced whole file
// are fsynced (with their directory) at every step; without it nothing is, which is safe
// against a killed process but not against power loss.
func ApplyPatchFileWith(patchPath, target string, opts ApplyOptions) (ApplyResult, error) {
	return applyPatchFile(patchPath, target, applyConfig{chunk: scanChunk, opts: opts})
}

func applyPatchFile(patchPath, target string, cfg applyConfig) (ApplyResult, error) {
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
	return applyOpenPatch(p, patchFileName(p, filepath.Base(target)), target, cfg)
}

// applyOpenPatch applies the file called name in patch p to the local file target.
func applyOpenPatch(p *Patch, name, target string, cfg applyConfig) (ApplyResult, error) {
	opts := cfg.opts
	// Refuse a symbolic link before taking its lock (which would be created beside the link);
	// the O_NOFOLLOW opens below close the window between the two.
	if err := refuseSymlink(target); err != nil {
		return ApplyResult{}, err
	}
	lock, err := lockTarget(target, opts)
	if err != nil {
		return ApplyResult{}, err
	}
	defer lock.release() // after the journal is gone: applyPatch removes it before it returns
	if f, ok := p.File(name); ok && f.Whole {
		return replaceWholeFile(p, f, target, opts)
	}
	tf, _, err := openTarget(target, os.O_RDWR)
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

// refuseSymlink returns an error, saying where it points, when path is a symbolic link.
func refuseSymlink(path string) error {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return nil // a missing file is the caller's to report (or a file the patch adds)
	}
	return symlinkTargetError(path)
}

func symlinkTargetError(path string) error {
	dest, err := os.Readlink(path)
	if err != nil {
		dest = "?"
	}
	return fmt.Errorf("%s is a symbolic link (to %q): weightfs apply changes the file it is given and does not follow links; apply to the file itself if that is what you mean", path, dest)
}

// openTarget opens the target without following a symbolic link (refused with a message
// that says where it points) and checks that it is a regular file. O_NONBLOCK keeps an open
// of a FIFO from hanging; it means nothing for a regular file.
func openTarget(path string, flag int) (*os.File, *unix.Stat_t, error) {
	f, err := os.OpenFile(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, nil, symlinkTargetError(path)
	}
	if err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, nil, fmt.Errorf("%s is not a regular file", path)
	}
	return f, &st, nil
}

// createTemp creates the temporary file path, which only the holder of the target's lock
// uses: whatever is at the name is unlinked first (it is a leftover of a crashed apply, or
// was planted; unlink removes a link itself, never what it names), and the create is
// exclusive and does not follow a link (one planted in between makes it fail).
func createTemp(path string, perm os.FileMode) (*os.File, error) {
	if err := unix.Unlink(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("remove %s, left by an earlier apply: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, perm)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return f, nil
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
// to the recorded result, given the old file's owner and mode, is renamed over the target.
func replaceWholeFile(p *Patch, f PatchFile, target string, opts ApplyOptions) (ApplyResult, error) {
	res := ApplyResult{File: f.Name, ModelVersion: p.Plan.ModelVersion, BaseVersion: p.Plan.BaseVersion, Synced: opts.Sync}
	kind, err := chooseDigest(f, opts)
	if err != nil {
		return res, err
	}
	res.Hash = kind.String()
	base, result := kind.want(f)
	have, old, err := hashTarget(target, kind)
	switch {
	case errors.Is(err, os.ErrNotExist) && f.New():
	case err != nil:
		return res, err
	case have == result:
		res.AlreadyApplied = true
		return res, nil
	case f.New() || have != base:
		return res, fmt.Errorf("%w: %s has %s %s, which is neither the patch's base %s nor its result %s; nothing was written",
			ErrBaseMismatch, f.Name, kind, have, base, result)
	}
	r, err := p.WholeFile(f.Name)
	if err != nil {
		return res, err
	}
	tmp := target + wholeTempSuffix
	perm := os.FileMode(0o644) // a new file: as a plain create would make it (less the umask)
	if old != nil {
		perm = 0o600 // until it has the old file's owner and mode
	}
	out, err := createTemp(tmp, perm)
	if err != nil {
		return res, fmt.Errorf("replace %s: %w", target, err)
	}
	h := kind.newHasher()
	n, err := io.Copy(io.MultiWriter(h, out), r)
	if err == nil && h.digest() != result {
		err = fmt.Errorf("%w: the patch's copy of %s does not hash to its recorded result", ErrMalformed, f.Name)
	}
	if err == nil && old != nil {
		err = keepOwnerAndMode(out, old)
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
		unix.Unlink(tmp)
		return res, fmt.Errorf("replace %s: %w", target, err)
	}
	res.ElementsWritten, res.Writes, res.Method = n, 1, MethodPwrite
	if !opts.Sync {
		return res, nil
	}
	return res, syncDir(filepath.Dir(target))
}

// keepOwnerAndMode gives the replacement f the owner, group and permission bits of the file
// it replaces (st). Only root can give a file to another user: anyone else keeps the group
// when they belong to it, and the owner becomes the caller. The mode is set after the owner
// because chown clears the set-user-ID and set-group-ID bits.
func keepOwnerAndMode(f *os.File, st *unix.Stat_t) error {
	fd := int(f.Fd())
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		if os.Geteuid() == 0 {
			return fmt.Errorf("give %s the owner %d:%d: %w", f.Name(), st.Uid, st.Gid, err)
		}
		unix.Fchown(fd, -1, int(st.Gid)) // best effort: a group the caller is not in is refused
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return fmt.Errorf("give %s the mode %#o: %w", f.Name(), st.Mode&0o7777, err)
	}
	return nil
}

// hashTarget hashes the file at path (opened as openTarget does) and returns its status.
func hashTarget(path string, kind digestKind) (digest, *unix.Stat_t, error) {
	f, st, err := openTarget(path, os.O_RDONLY)
	if err != nil {
		return digest{}, nil, err
	}
	defer f.Close()
	h := kind.newHasher()
	if _, err := io.Copy(h, f); err != nil {
		return digest{}, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return h.digest(), st, nil
}

// fileJournal is the journal kept in the file at path. Synced (ApplyOptions.Sync), it is
// written to a temporary file, synced, renamed into place, and the directory synced.
// Unsynced it still survives a killed process: the rename and unlink are atomic and the page
// cache keeps the bytes.
type fileJournal struct {
	path string
	sync bool
}

// maxJournal bounds the journal read: a record is ~250 bytes.
const maxJournal = 64 << 10

func (j fileJournal) Load() ([]byte, bool, error) {
	f, err := os.OpenFile(j.path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read apply journal: %w", wrapLinkError(err, j.path, "the journal of an apply"))
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("read apply journal: %s is not a regular file", j.path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxJournal+1))
	if err != nil {
		return nil, false, fmt.Errorf("read apply journal %s: %w", j.path, err)
	}
	if len(b) > maxJournal {
		return nil, false, fmt.Errorf("%w: apply journal %s is over %d bytes", ErrMalformed, j.path, maxJournal)
	}
	return b, true, nil
}

func (j fileJournal) Store(record []byte) error {
	tmp := j.path + ".tmp"
	f, err := createTemp(tmp, 0o644)
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
		unix.Unlink(tmp)
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
