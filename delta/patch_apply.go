package delta

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Applying a patch in place (weightfs apply). The target is read once: while the base is
// hashed, the patch is applied to each chunk in memory and the result hashed too (on two
// goroutines, patch_apply_scan.go), so before anything is written we know the target is the
// patch's base (or already its result) and that the patch produces the recorded result.
// Writing then touches only the pages that hold changed elements (patched in memory and
// written back with pwrite, stored into a shared mapping of the file, or one pwrite per run
// of adjacent elements; patch_apply_write.go, patch_apply_pages.go), under a journal that
// makes a crash recoverable by running the same command again:
//
//  1. store the journal (patch identity, file, size, the file's first 8 bytes);
//  2. overwrite the 8-byte header length with applyMarker (no safetensors reader accepts
//     it, and the file's hash is neither version's);
//  3. write the changed elements;
//  4. restore the first 8 bytes;
//  5. remove the journal.
//
// A run that finds the journal of this patch skips the base check (the file may be half
// written), verifies that applying the patch yields the result, and redoes steps 2-5;
// overwriting is idempotent, so any number of interrupted runs converge.
//
// Against a killed process (kill -9, OOM) no fsync is needed: the steps reach the kernel's
// page cache in program order and the page cache outlives the process. Against power loss
// the kernel's writeback order is arbitrary, so ApplyOptions.Sync adds an fsync after steps
// 2, 3 and 4 (and keeps the journal durably); after step 3 at RL densities that writes back
// nearly every page of the file, as much disk I/O as rewriting it.

// ApplyTarget is the file a patch is applied to; *os.File satisfies it. A target that also
// has Fd() uintptr (as *os.File does) is read and written through a shared memory mapping
// when the platform and its file system allow it, else with ReadAt and WriteAt.
type ApplyTarget interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// Journal keeps the record of an apply in progress.
type Journal interface {
	// Load returns the stored record; ok is false when there is none.
	Load() (record []byte, ok bool, err error)
	// Store saves record so that it survives the crashes the caller cares about (a killed
	// process: the page cache suffices; power loss: it must be synced) once Store returns.
	Store(record []byte) error
	// Remove deletes the record; removing a missing record is not an error.
	Remove() error
}

// ApplyOptions choose the durability and the hash of an apply. The zero value is the fast
// default: safe against a killed process, checked by xxh3-128 when the patch records it.
type ApplyOptions struct {
	// Sync makes the apply safe against power loss too: the target is fsynced after it is
	// marked, after the changes are written and after it is restored (see the top of this
	// file). It costs a writeback of every page the changes touch.
	Sync bool
	// VerifySHA256 checks the base and result by SHA-256 even when the patch records
	// xxh3-128 (which is several times faster). Patches without xxh3 always use SHA-256; a
	// file recorded by xxh3-128 only (PatchFile.XXH3Only) is then refused.
	VerifySHA256 bool
	// NoWait makes ApplyPatchFileWith refuse at once, with an error wrapping ErrLocked that names
	// the holder, when another apply of the same file holds its lock. By default it waits for
	// that apply to end, then checks the file as that apply left it (see patch_apply_lock.go).
	NoWait bool
	// Waiting, when set, is called when ApplyPatchFileWith has to wait for another apply of the
	// same file, with a description of the holder (its process id and host): once, or again
	// if yet another apply takes the lock first.
	Waiting func(holder string)
}

// applyMarker replaces a file's header length while an apply is writing it. As a
// little-endian u64 it is far above MaxHeaderLen, so every safetensors reader refuses it.
const applyMarker = "WFSAPPLY"

// journalRecord is what the journal holds (JSON).
type journalRecord struct {
	Format  string `json:"format"` // "weightfs-apply-journal"
	Version int    `json:"version"`
	PatchID string `json:"patch_id"` // hex SHA-256 of the patch header
	File    string `json:"file"`
	Size    int64  `json:"size"`
	First8  string `json:"first8"` // hex of the file's original first 8 bytes
}

const journalFormat = "weightfs-apply-journal"

// Ways ApplyResult.Method names how the changes were written.
const (
	MethodMmap   = "mmap"   // stores into a shared mapping of the file
	MethodPwrite = "pwrite" // one WriteAt per run of adjacent changed elements
	MethodPages  = "pages"  // one WriteAt per run of changed pages, patched in memory (patch_apply_pages.go)
)

// ApplyResult says what ApplyPatchWith did.
type ApplyResult struct {
	File            string // the file's path as recorded in the patch
	ModelVersion    uint64 // the version the patch leads to
	BaseVersion     uint64 // the version it starts from
	AlreadyApplied  bool   // the target already was the result: nothing was written
	Recovered       bool   // an interrupted apply of this patch was found and completed
	ElementsWritten int64  // changed elements written
	Writes          int    // WriteAt calls (adjacent elements, or pages, coalesced); 0 with mmap
	Method          string // MethodMmap, MethodPages or MethodPwrite; "" when nothing was written
	Hash            string // the hash that checked base and result: "xxh3-128" or "SHA-256"
	Synced          bool   // the power-loss-safe ordering (ApplyOptions.Sync) was used
}

// String describes the outcome in one line.
func (r ApplyResult) String() string {
	how := fmt.Sprintf("%d changed elements", r.ElementsWritten)
	switch r.Method {
	case MethodMmap:
		how += " stored through a shared mapping"
	case MethodPwrite:
		how += fmt.Sprintf(" in %d writes", r.Writes)
	case MethodPages:
		how += fmt.Sprintf(" in %d writes of whole pages", r.Writes)
	}
	how += fmt.Sprintf(", %s checked", r.Hash)
	if r.Synced {
		how += ", synced"
	}
	switch {
	case r.AlreadyApplied:
		return fmt.Sprintf("%s is already weight_v%06d (%s checked); nothing written", r.File, r.ModelVersion, r.Hash)
	case r.Recovered:
		return fmt.Sprintf("%s: finished an interrupted apply: weight_v%06d -> weight_v%06d, %s",
			r.File, r.BaseVersion, r.ModelVersion, how)
	}
	return fmt.Sprintf("%s: weight_v%06d -> weight_v%06d, %s", r.File, r.BaseVersion, r.ModelVersion, how)
}

// ApplyPatchWith applies the changes of file name (as recorded in the patch) to target, a
// safetensors file of size bytes, in place. The target must be the patch's base (checked by
// hash before anything is written; otherwise the error wraps ErrBaseMismatch and the target
// is untouched) or already its result (then nothing is written). journal records the apply
// while it writes; see the comment at the top of this file. ApplyPatchWith does not lock: the
// caller must make sure that no other apply of the same file runs meanwhile
// (ApplyPatchFileWith does, see patch_apply_lock.go).
func ApplyPatchWith(p *Patch, target ApplyTarget, size int64, name string, journal Journal, opts ApplyOptions) (ApplyResult, error) {
	return applyPatch(p, target, size, name, journal, applyConfig{chunk: scanChunk, opts: opts})
}

// applyConfig holds the options and what tests vary: the read chunk (small, to cut elements
// across chunks), the reference paths, and a failpoint called between steps (to simulate a
// crash there).
type applyConfig struct {
	opts       ApplyOptions
	chunk      int64
	sequential bool // scan on one goroutine (the reference of the parallel scan)
	noMmap     bool // write with WriteAt (the reference and fallback of the mapped write)
	stores     bool // with a mapping, store the elements into it whatever the density
	pages      bool // with a mapping, write whole pages whatever the density
	workers    int  // goroutines of the mapped write; 0: GOMAXPROCS
	failpoint  func(step string) error
}

func (c applyConfig) fail(step applyStep) error {
	if c.failpoint == nil {
		return nil
	}
	return c.failpoint(string(step))
}

// applyStep names the points between the steps of an apply, where tests inject crashes.
type applyStep string

const (
	stepScanned   applyStep = "scanned"   // read pass done, nothing written
	stepJournaled applyStep = "journaled" // journal stored
	stepMarked    applyStep = "marked"    // header length replaced by the marker
	stepWroteRun  applyStep = "wrote-run" // after each coalesced write (or batch of stores)
	stepWritten   applyStep = "written"   // all changes written (and synced with Sync)
	stepRestored  applyStep = "restored"  // header length restored, journal still there
)

func applyPatch(p *Patch, target ApplyTarget, size int64, name string, journal Journal, cfg applyConfig) (ApplyResult, error) {
	res := ApplyResult{File: name, ModelVersion: p.Plan.ModelVersion, BaseVersion: p.Plan.BaseVersion, Synced: cfg.opts.Sync}
	f, ok := p.File(name)
	if !ok {
		return res, fmt.Errorf("%w: the patch (v%d from v%d) changes no file %q", ErrBaseMismatch, p.Plan.ModelVersion, p.Plan.BaseVersion, name)
	}
	if f.Whole {
		return res, fmt.Errorf("file %q is carried whole in the patch, not as sparse changes: replace it with the bytes of Patch.WholeFile", name)
	}
	kind, err := chooseDigest(f, cfg.opts)
	if err != nil {
		return res, err
	}
	res.Hash = kind.String()
	rec, resuming, err := loadJournal(journal, p, name, size)
	if err != nil {
		return res, err
	}
	var override *[8]byte
	if resuming {
		override = &rec
	}
	layout, err := readTargetLayout(p.TensorsOf(name), target, size, name, override, f.NewHeader)
	if err != nil {
		return res, err
	}
	var m *fileMapping
	if !cfg.noMmap {
		if m, err = mapTarget(target, size); err != nil && !errors.Is(err, errNoMapping) {
			return res, err
		}
		if m != nil {
			defer m.unmap() // its only error would be a bad address; the stores are in already
		}
	}
	scan, err := scanTarget(p, layout, target, m, size, kind, !resuming, cfg)
	if err != nil {
		return res, err
	}
	if done, err := judgeScan(p, f, name, kind, scan, resuming); done || err != nil {
		res.AlreadyApplied = done
		return res, err
	}
	if err := cfg.fail(stepScanned); err != nil {
		return res, err
	}
	if !resuming {
		if err := storeJournal(journal, p, name, size, layout.first8); err != nil {
			return res, err
		}
		if err := cfg.fail(stepJournaled); err != nil {
			return res, err
		}
	}
	original := layout.first8
	if resuming {
		original = rec
	}
	if err := writeSteps(p, layout, target, m, original, name, &res, cfg); err != nil {
		return res, err
	}
	if err := journal.Remove(); err != nil {
		return res, err
	}
	res.Recovered = resuming
	return res, nil
}

// judgeScan compares the scanned target with file f of the patch, before anything is
// written: done when a fresh apply finds the result already there; an error when a fresh
// apply finds neither base nor result, or when the patch (or, resuming, the rest of the
// interrupted apply) would not give the recorded result.
func judgeScan(p *Patch, f PatchFile, name string, kind digestKind, scan scanResult, resuming bool) (done bool, err error) {
	base, result := kind.want(f)
	if !resuming {
		switch {
		case scan.input == result:
			return true, nil
		case scan.input != base:
			return false, fmt.Errorf("%w: %s has %s %s, which is neither the patch's base %s (v%d) nor its result %s (v%d); nothing was written",
				ErrBaseMismatch, name, kind, scan.input, base, p.Plan.BaseVersion, result, p.Plan.ModelVersion)
		}
	}
	if scan.output != result {
		if resuming {
			return false, fmt.Errorf("%w: finishing the interrupted apply of %s would give %s %s, not the patch's result %s; the file was changed by something else",
				ErrBaseMismatch, name, kind, scan.output, result)
		}
		return false, fmt.Errorf("%w: patch turns %s into %s %s, not its recorded result %s; nothing was written", ErrMalformed, name, kind, scan.output, result)
	}
	return false, nil
}

// writeSteps writes the apply into target once the journal holds it (the comment at the top
// of this file): the marker over the header length, the changes (and a header-only change's
// new header), a sync, and the header length original restored.
func writeSteps(p *Patch, layout targetLayout, target ApplyTarget, m *fileMapping, original [8]byte, name string, res *ApplyResult, cfg applyConfig) error {
	if err := writeAndSync(target, []byte(applyMarker), cfg.opts.Sync, "mark %s as being patched", name); err != nil {
		return err
	}
	if err := cfg.fail(stepMarked); err != nil {
		return err
	}
	if err := writeChanges(p, layout, target, m, res, cfg); err != nil {
		return fmt.Errorf("write changes to %s: %w", name, err)
	}
	if layout.newPrefix != nil {
		// A header-only change: the new header after its 8 length bytes, which are equal
		// (the marker stays in place until step 4 restores them).
		if _, err := target.WriteAt(layout.newPrefix[8:], 8); err != nil {
			return fmt.Errorf("write the new header of %s: %w", name, err)
		}
	}
	if cfg.opts.Sync {
		if err := target.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", name, err)
		}
	}
	if err := cfg.fail(stepWritten); err != nil {
		return err
	}
	if err := writeAndSync(target, original[:], cfg.opts.Sync, "restore the header length of %s", name); err != nil {
		return err
	}
	return cfg.fail(stepRestored)
}

// writeAndSync writes the first 8 bytes of the target, then syncs it when sync is set.
func writeAndSync(target ApplyTarget, first8 []byte, sync bool, what, name string) error {
	if _, err := target.WriteAt(first8, 0); err != nil {
		return fmt.Errorf(what+": %w", name, err)
	}
	if !sync {
		return nil
	}
	if err := target.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", name, err)
	}
	return nil
}

// loadJournal returns the original first 8 bytes recorded by an interrupted apply of this
// patch to this file; resuming is false when there is no journal.
func loadJournal(j Journal, p *Patch, name string, size int64) (first8 [8]byte, resuming bool, err error) {
	b, ok, err := j.Load()
	if err != nil || !ok {
		return first8, false, err
	}
	var rec journalRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Format != journalFormat {
		return first8, false, fmt.Errorf("%w: apply journal is not a weightfs apply journal", ErrMalformed)
	}
	if rec.Version != 1 {
		return first8, false, fmt.Errorf("%w: apply journal version %d", ErrUnsupportedVersion, rec.Version)
	}
	if rec.PatchID != hex.EncodeToString(p.ID[:]) || rec.File != name || rec.Size != size {
		return first8, false, fmt.Errorf("%w: the apply journal belongs to another interrupted apply (patch %.16s..., file %q, %d bytes); finish that one first",
			ErrBaseMismatch, rec.PatchID, rec.File, rec.Size)
	}
	raw, err := hex.DecodeString(rec.First8)
	if err != nil || len(raw) != 8 {
		return first8, false, fmt.Errorf("%w: apply journal holds first8 %q", ErrMalformed, rec.First8)
	}
	copy(first8[:], raw)
	return first8, true, nil
}

func storeJournal(j Journal, p *Patch, name string, size int64, first8 [8]byte) error {
	b, err := json.Marshal(journalRecord{Format: journalFormat, Version: 1, PatchID: hex.EncodeToString(p.ID[:]),
		File: name, Size: size, First8: hex.EncodeToString(first8[:])})
	if err != nil {
		return fmt.Errorf("encode apply journal: %w", err)
	}
	return j.Store(b)
}
