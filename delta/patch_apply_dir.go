package delta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Applying a patch to a checkpoint directory (weightfs apply PATCH DIR): every file the patch
// names is applied as ApplyPatchFileWith applies it (base check, journal, lock), files it does
// not name are left alone, and the directory records the version it holds in a state file
// (docs/format.md Part III §3):
//
//	DIR/.weightfs/state.json   {"format":"weightfs-dir-state","format_version":1,"version":N}
//	DIR/.weightfs/lock         flock(2)ed for the whole apply (two applies of DIR take turns)
//
// Before the first file is touched the state records the apply in progress ("pending": N,
// "version": K); after the last one it records "version": N alone (with the record of files,
// "files", when the directory has one: patch_apply_dir_files.go). A run refused before it
// changed any file puts back the state it found. Each write of the state is
// a new file renamed over the old one, so a crash at any point leaves either state, and a
// re-run of the same patch finishes the files the crash left (each file's own journal or hash
// says where it stands). A follower that finds a pending apply finishes it before anything
// else, so files never mix three versions.

// StateDir is the directory, inside a checkpoint directory, holding weightfs's state.
const StateDir = ".weightfs"

// StateFile is the state file's name in StateDir.
const StateFile = "state.json"

const dirStateFormat = "weightfs-dir-state"

// DirState is what a checkpoint directory's state file records.
type DirState struct {
	Format        string `json:"format"`         // "weightfs-dir-state"
	FormatVersion int    `json:"format_version"` // 1
	// Version is the version every file of the directory holds; 0: none known (the directory
	// is being filled by a full copy for the first time).
	Version uint64 `json:"version"`
	// Pending, when set, is the version an interrupted apply or copy was taking the directory
	// to: some files may hold it, others Version. Only that version may be applied next.
	Pending uint64 `json:"pending,omitempty"`
	// Full says the pending change is a full copy (no patch), not a patch from Version.
	Full bool `json:"full,omitempty"`
	// Source is where the follower reads versions from (its mount), for people reading it.
	Source string `json:"source,omitempty"`
	// Files, when recorded, are the files weightfs put in the directory, as it left them
	// (patch_apply_dir_files.go); nil: not known (a state written before they were recorded,
	// or by applies alone to a directory nobody recorded).
	Files []DirFile `json:"files,omitempty"`
}

// ReadDirState returns dir's state; ok is false when dir has none (never marked).
func ReadDirState(dir string) (st DirState, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, StateDir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return DirState{}, false, nil
	}
	if err != nil {
		return DirState{}, false, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&st); err != nil || st.Format != dirStateFormat || st.FormatVersion != 1 {
		return DirState{}, false, fmt.Errorf("%w: %s: not a weightfs directory state (%v)", ErrMalformed,
			filepath.Join(dir, StateDir, StateFile), err)
	}
	for _, f := range st.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) || f.Path == StateDir || strings.HasPrefix(f.Path, StateDir+"/") {
			return DirState{}, false, fmt.Errorf("%w: %s records %q, which is not a file inside the directory", ErrMalformed,
				filepath.Join(dir, StateDir, StateFile), f.Path)
		}
	}
	return st, true, nil
}

// WriteDirState replaces dir's state file with st: written to a temporary file, fsynced,
// renamed into place, and the directory fsynced, so a crash leaves the old state or the new.
func WriteDirState(dir string, st DirState) error {
	st.Format, st.FormatVersion = dirStateFormat, 1
	sd := filepath.Join(dir, StateDir)
	if err := os.MkdirAll(sd, 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(sd, StateFile+".tmp")
	f, err := createTemp(tmp, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(sd, StateFile))
	}
	if err != nil {
		unix.Unlink(tmp)
		return fmt.Errorf("write state of %s: %w", dir, err)
	}
	return syncDir(sd)
}

// LockDir takes dir's lock (DIR/.weightfs/lock), waiting for another holder unless noWait;
// call the returned function to release it. Applies and a follower take it so that two of
// them never write one directory at once.
func LockDir(dir string, noWait bool) (func(), error) {
	sd := filepath.Join(dir, StateDir)
	if err := os.MkdirAll(sd, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(sd, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	how := unix.LOCK_EX
	if noWait {
		how |= unix.LOCK_NB
	}
	if err := flock(int(f.Fd()), how); err != nil {
		holder := lockHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w: %s holds %s (a weightfs follow, or an apply of the directory)",
				dir, ErrLocked, holder, filepath.Join(sd, "lock"))
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	// Record the holder for the error above (the lock file stays: it is the directory's).
	host, _ := os.Hostname()
	if f.Truncate(0) == nil {
		f.WriteAt(fmt.Appendf(nil, "%d %s\n", os.Getpid(), strings.Join(strings.Fields(host), "_")), 0)
	}
	return func() { f.Close() }, nil
}

// DirApplyResult says what ApplyPatchDir did.
type DirApplyResult struct {
	ModelVersion, BaseVersion uint64
	AlreadyApplied            bool          // the state already recorded the patch's version
	Files                     []ApplyResult // one per file the patch names, in its order
}

// String describes the outcome in one line.
func (r DirApplyResult) String() string {
	if r.AlreadyApplied {
		return fmt.Sprintf("already at version %d: nothing to do", r.ModelVersion)
	}
	var written int64
	done := 0
	for _, f := range r.Files {
		written += f.ElementsWritten
		if !f.AlreadyApplied {
			done++
		}
	}
	return fmt.Sprintf("version %d -> %d: %d files patched (%d already were), %d elements/bytes written",
		r.BaseVersion, r.ModelVersion, done, len(r.Files)-done, written)
}

// ApplyPatchDir applies the patch file at patchPath to the checkpoint directory dir (see the
// top of this file). The directory's state must be the patch's base version, or its version
// (then nothing is done), or an interrupted apply of this same patch; a directory without a
// state is accepted when every file passes its own base check. A file the patch names that
// lies outside dir (an absolute path, "..", or under .weightfs) is refused.
func ApplyPatchDir(patchPath, dir string, opts ApplyOptions) (DirApplyResult, error) {
	res, _, err := applyPatchDir(patchPath, dir, opts, false)
	return res, err
}

// ApplyPatchDirStep applies a patch to dir as ApplyPatchDir does, for a caller that holds
// dir's lock (LockDir) and completes the step itself: it leaves the state pending (the base
// version, pending the patch's, the record of files extended by every file the patch names)
// and returns that state. The caller records the patch's version with WriteDirState once its
// own part is done (a follower removes the files the version lacks and gives each file the
// version's mode first); a caller killed before that finds the step pending, and running it
// again finds every file already applied. A state already at the patch's version is
// returned as it is, with AlreadyApplied.
func ApplyPatchDirStep(patchPath, dir string, opts ApplyOptions) (DirApplyResult, DirState, error) {
	return applyPatchDir(patchPath, dir, opts, true)
}

func applyPatchDir(patchPath, dir string, opts ApplyOptions, step bool) (DirApplyResult, DirState, error) {
	pf, err := os.Open(patchPath)
	if err != nil {
		return DirApplyResult{}, DirState{}, err
	}
	defer pf.Close()
	fi, err := pf.Stat()
	if err != nil {
		return DirApplyResult{}, DirState{}, err
	}
	p, err := OpenPatch(pf, fi.Size())
	if err != nil {
		return DirApplyResult{}, DirState{}, err
	}
	res := DirApplyResult{ModelVersion: p.Plan.ModelVersion, BaseVersion: p.Plan.BaseVersion}
	if di, err := os.Stat(dir); err != nil || !di.IsDir() {
		return res, DirState{}, fmt.Errorf("%s is not a directory (%v)", dir, err)
	}
	if err := checkDirNames(p); err != nil {
		return res, DirState{}, err
	}
	if !step {
		unlock, err := LockDir(dir, opts.NoWait)
		if err != nil {
			return res, DirState{}, err
		}
		defer unlock()
	}
	st, marked, err := ReadDirState(dir)
	if err != nil {
		return res, DirState{}, err
	}
	want := p.Plan.ModelVersion
	switch {
	case marked && st.Version == want && st.Pending == 0:
		res.AlreadyApplied = true
		return res, st, nil
	case marked && st.Pending != 0 && (st.Pending != want || st.Full || st.Version != p.Plan.BaseVersion):
		return res, st, fmt.Errorf("%w: %s is part-way from version %d to %d; only that step can be applied to it",
			ErrBaseMismatch, dir, st.Version, st.Pending)
	case marked && st.Pending == 0 && st.Version != p.Plan.BaseVersion:
		return res, st, fmt.Errorf("%w: %s holds version %d, the patch goes from version %d to %d; nothing was written",
			ErrBaseMismatch, dir, st.Version, p.Plan.BaseVersion, want)
	}
	resuming := marked && st.Pending != 0
	pending := pendingDirState(p, st)
	if err := WriteDirState(dir, pending); err != nil {
		return res, st, err
	}
	cfg := applyConfig{chunk: scanChunk, opts: opts}
	for _, f := range p.Plan.Files {
		target := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return res, pending, err
		}
		r, err := applyOpenPatch(p, f.Name, target, cfg)
		if err != nil {
			err = fmt.Errorf("apply to %s: %w", f.Name, err)
			if !resuming && nothingWritten(res.Files, target, err) {
				// Refused before this run changed any file: the directory is as it was, and so
				// must its state be, or the right patch would be refused from now on.
				return res, st, restoreDirState(dir, st, marked, err)
			}
			return res, pending, err
		}
		res.Files = append(res.Files, r)
	}
	if step {
		return res, pending, nil
	}
	done, err := doneDirState(dir, p, st, pending)
	if err != nil {
		return res, pending, err
	}
	return res, done, WriteDirState(dir, done)
}

// checkDirNames refuses a patch that names a file outside the directory, or in its state
// directory.
func checkDirNames(p *Patch) error {
	for _, f := range p.Plan.Files {
		if !filepath.IsLocal(filepath.FromSlash(f.Name)) || f.Name == StateDir || strings.HasPrefix(f.Name, StateDir+"/") {
			return fmt.Errorf("%w: patch names %q, which is not a file inside a directory", ErrMalformed, f.Name)
		}
	}
	return nil
}

// pendingDirState is the state recorded while p is applied to a directory whose state was st.
func pendingDirState(p *Patch, st DirState) DirState {
	pending := DirState{Version: p.Plan.BaseVersion, Pending: p.Plan.ModelVersion, Source: st.Source, Files: st.Files}
	if st.Files != nil {
		// Every file the patch may create is one weightfs put there.
		named := make([]DirFile, len(p.Plan.Files))
		for i, f := range p.Plan.Files {
			named[i] = DirFile{Path: f.Name}
		}
		pending.Files = UnionFiles(st.Files, named)
	}
	return pending
}

// doneDirState is the state recorded once p is applied to dir, whose state was st before
// and pending during the apply.
func doneDirState(dir string, p *Patch, st, pending DirState) (DirState, error) {
	done := DirState{Version: p.Plan.ModelVersion, Source: st.Source}
	if pending.Files != nil {
		// The files the patch names as they are now; the others as they were recorded. (A
		// file the result version no longer has stays: the patch format has no deletions.)
		now := make([]DirFile, 0, len(p.Plan.Files))
		for _, f := range p.Plan.Files {
			df, err := StatDirFile(dir, f.Name)
			if err != nil {
				return DirState{}, err
			}
			now = append(now, df)
		}
		done.Files = UnionFiles(now, pending.Files)
	}
	return done, nil
}

// nothingWritten says whether an apply run that failed with err on target changed no file:
// every file before it was already the result, and target's apply stopped at a check made
// before its first write (its base or its result hash, its lock, a missing file), leaving no
// journal.
func nothingWritten(done []ApplyResult, target string, err error) bool {
	for _, r := range done {
		if !r.AlreadyApplied {
			return false
		}
	}
	if !errors.Is(err, ErrBaseMismatch) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrLocked) && !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	_, jerr := os.Lstat(target + JournalSuffix)
	return errors.Is(jerr, fs.ErrNotExist)
}

// restoreDirState puts back the state a run found (st, or none when !marked) after the run
// was refused before writing anything; cause is the refusal, returned with what was done.
func restoreDirState(dir string, st DirState, marked bool, cause error) error {
	var err error
	if marked {
		err = WriteDirState(dir, st)
	} else if err = os.Remove(filepath.Join(dir, StateDir, StateFile)); err == nil {
		err = syncDir(filepath.Join(dir, StateDir))
	}
	if err != nil {
		return fmt.Errorf("%w; nothing was written, but the state could not be put back: %v", cause, err)
	}
	return fmt.Errorf("%w; the directory and its state are as they were", cause)
}
