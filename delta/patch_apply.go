package delta

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// Applying a patch in place (weightfs apply). The target is read once: while the base is
// hashed, the patch is applied to each chunk in memory and the result hashed too, so before
// anything is written we know the target is the patch's base (or already its result) and that
// the patch produces the recorded result. Writing then touches only changed elements, under a
// journal that makes a crash recoverable by running the same command again:
//
//  1. store the journal (patch identity, file, size, the file's first 8 bytes), durably;
//  2. overwrite the 8-byte header length with applyMarker (no safetensors reader accepts
//     it, and the file's hash is neither version's), sync;
//  3. write the changed elements, sync;
//  4. restore the first 8 bytes, sync;
//  5. remove the journal.
//
// A run that finds the journal of this patch skips the base check (the file may be half
// written), verifies that applying the patch yields the result, and redoes steps 2-5;
// overwriting is idempotent, so any number of interrupted runs converge.

// ApplyTarget is the file a patch is applied to; *os.File satisfies it.
type ApplyTarget interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// Journal keeps the record of an apply in progress.
type Journal interface {
	// Load returns the stored record; ok is false when there is none.
	Load() (record []byte, ok bool, err error)
	// Store saves record durably (it survives a crash once Store returns).
	Store(record []byte) error
	// Remove deletes the record; removing a missing record is not an error.
	Remove() error
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

// ApplyResult says what ApplyPatch did.
type ApplyResult struct {
	File            string // the file's path as recorded in the patch
	ModelVersion    uint64 // the version the patch leads to
	BaseVersion     uint64 // the version it starts from
	AlreadyApplied  bool   // the target already was the result: nothing was written
	Recovered       bool   // an interrupted apply of this patch was found and completed
	ElementsWritten int64  // changed elements written
	Writes          int    // WriteAt calls for elements (adjacent elements are coalesced)
}

// String describes the outcome in one line.
func (r ApplyResult) String() string {
	switch {
	case r.AlreadyApplied:
		return fmt.Sprintf("%s is already weight_v%06d; nothing written", r.File, r.ModelVersion)
	case r.Recovered:
		return fmt.Sprintf("%s: finished an interrupted apply: weight_v%06d -> weight_v%06d, %d changed elements in %d writes",
			r.File, r.BaseVersion, r.ModelVersion, r.ElementsWritten, r.Writes)
	}
	return fmt.Sprintf("%s: weight_v%06d -> weight_v%06d, %d changed elements in %d writes",
		r.File, r.BaseVersion, r.ModelVersion, r.ElementsWritten, r.Writes)
}

// ApplyPatch applies the changes of file name (as recorded in the patch) to target, a
// safetensors file of size bytes, in place. The target must be the patch's base (checked by
// SHA-256 before anything is written; otherwise the error wraps ErrBaseMismatch and the
// target is untouched) or already its result (then nothing is written). journal records the
// apply while it writes; see the comment at the top of this file.
func ApplyPatch(p *Patch, target ApplyTarget, size int64, name string, journal Journal) (ApplyResult, error) {
	return applyPatch(p, target, size, name, journal, applyConfig{chunk: scanChunk})
}

// applyConfig holds what tests vary: the read chunk (small, to cut elements across chunks)
// and a failpoint called between steps (to simulate a crash there).
type applyConfig struct {
	chunk     int64
	failpoint func(step string) error
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
	stepWroteRun  applyStep = "wrote-run" // after each coalesced write
	stepWritten   applyStep = "written"   // all changes written and synced
	stepRestored  applyStep = "restored"  // header length restored, journal still there
)

func applyPatch(p *Patch, target ApplyTarget, size int64, name string, journal Journal, cfg applyConfig) (ApplyResult, error) {
	res := ApplyResult{File: name, ModelVersion: p.Plan.ModelVersion, BaseVersion: p.Plan.BaseVersion}
	f, ok := p.File(name)
	if !ok {
		return res, fmt.Errorf("%w: the patch (v%d from v%d) changes no file %q", ErrBaseMismatch, p.Plan.ModelVersion, p.Plan.BaseVersion, name)
	}
	if f.Whole {
		return res, fmt.Errorf("file %q is carried whole in the patch, not as sparse changes: replace it with the bytes of Patch.WholeFile", name)
	}
	rec, resuming, err := loadJournal(journal, p, name, size)
	if err != nil {
		return res, err
	}
	var override *[8]byte
	if resuming {
		override = &rec
	}
	scan, err := scanTarget(p, p.TensorsOf(name), target, size, name, override, cfg.chunk)
	if err != nil {
		return res, err
	}
	if !resuming {
		switch {
		case scan.input == f.ResultSHA256:
			res.AlreadyApplied = true
			return res, nil
		case scan.input != f.BaseSHA256:
			return res, fmt.Errorf("%w: %s has SHA-256 %x, which is neither the patch's base %x (v%d) nor its result %x (v%d); nothing was written",
				ErrBaseMismatch, name, scan.input, f.BaseSHA256, p.Plan.BaseVersion, f.ResultSHA256, p.Plan.ModelVersion)
		}
	}
	if scan.output != f.ResultSHA256 {
		if resuming {
			return res, fmt.Errorf("%w: finishing the interrupted apply of %s would give SHA-256 %x, not the patch's result %x; the file was changed by something else",
				ErrBaseMismatch, name, scan.output, f.ResultSHA256)
		}
		return res, fmt.Errorf("%w: patch turns %s into SHA-256 %x, not its recorded result %x; nothing was written", ErrMalformed, name, scan.output, f.ResultSHA256)
	}
	if err := cfg.fail(stepScanned); err != nil {
		return res, err
	}
	if !resuming {
		if err := storeJournal(journal, p, name, size, scan.first8); err != nil {
			return res, err
		}
		if err := cfg.fail(stepJournaled); err != nil {
			return res, err
		}
	}
	original := scan.first8
	if resuming {
		original = rec
	}
	if _, err := target.WriteAt([]byte(applyMarker), 0); err != nil {
		return res, fmt.Errorf("mark %s as being patched: %w", name, err)
	}
	if err := target.Sync(); err != nil {
		return res, fmt.Errorf("sync %s: %w", name, err)
	}
	if err := cfg.fail(stepMarked); err != nil {
		return res, err
	}
	if err := writeChanges(p, scan, target, &res, cfg); err != nil {
		return res, fmt.Errorf("write changes to %s: %w", name, err)
	}
	if err := target.Sync(); err != nil {
		return res, fmt.Errorf("sync %s: %w", name, err)
	}
	if err := cfg.fail(stepWritten); err != nil {
		return res, err
	}
	if _, err := target.WriteAt(original[:], 0); err != nil {
		return res, fmt.Errorf("restore the header length of %s: %w", name, err)
	}
	if err := target.Sync(); err != nil {
		return res, fmt.Errorf("sync %s: %w", name, err)
	}
	if err := cfg.fail(stepRestored); err != nil {
		return res, err
	}
	if err := journal.Remove(); err != nil {
		return res, err
	}
	res.Recovered = resuming
	return res, nil
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

// appliedTensor pairs a changed tensor of the patch with its place in the target.
type appliedTensor struct {
	plan   PatchTensor
	target Tensor
}

// scanResult is what the read pass learned.
type scanResult struct {
	input, output [32]byte // SHA-256 of the target (first 8 bytes as recorded) and of the patched target
	first8        [8]byte  // the target's first 8 bytes as found
	dataStart     int64
	tensors       []appliedTensor // sorted by offset
}

// scanChunk is the read size of the pass over the target.
const scanChunk = 4 << 20

// scanTarget reads the target once, hashing it as it is and as the patch would make it.
// override, when set, replaces the target's first 8 bytes (the marker of an interrupted apply).
func scanTarget(p *Patch, tensors []PatchTensor, target io.ReaderAt, size int64, name string, override *[8]byte, chunkSize int64) (scanResult, error) {
	var s scanResult
	if size < 8 {
		return s, fmt.Errorf("%w: %s has %d bytes, too short to be a safetensors file", ErrBaseMismatch, name, size)
	}
	if err := readFull(target, s.first8[:], 0); err != nil {
		return s, fmt.Errorf("read %s: %w", name, err)
	}
	first8 := s.first8
	if override != nil {
		first8 = *override
	} else if string(first8[:]) == applyMarker {
		return s, fmt.Errorf("%w: %s is marked by an interrupted weightfs apply whose journal is missing; it is neither version, restore it from a copy",
			ErrBaseMismatch, name)
	}
	n, err := HeaderLength(first8[:], size)
	if err != nil {
		return s, fmt.Errorf("%w: %s is not the patch's base: %v", ErrBaseMismatch, name, err)
	}
	prefix := make([]byte, 8+n)
	copy(prefix, first8[:])
	if err := readFull(target, prefix[8:], 8); err != nil {
		return s, fmt.Errorf("read header of %s: %w", name, err)
	}
	h, err := ParseHeader(prefix, size)
	if err != nil {
		return s, fmt.Errorf("%w: %s is not the patch's base: %v", ErrBaseMismatch, name, err)
	}
	s.dataStart = h.DataStart()
	byName := tensorsByName(h)
	for _, t := range tensors {
		th, ok := byName[t.Name]
		if !ok || th.DType != t.DType || th.Elements() != t.Elements {
			return s, fmt.Errorf("%w: %s has no tensor %q of %s with %d elements (found %v)", ErrBaseMismatch, name, t.Name, t.DType, t.Elements, th)
		}
		s.tensors = append(s.tensors, appliedTensor{plan: t, target: th})
	}
	slices.SortFunc(s.tensors, func(a, b appliedTensor) int { return cmpInt64(a.target.Begin, b.target.Begin) })

	in, out := sha256.New(), sha256.New()
	in.Write(prefix)
	out.Write(prefix)
	cursors := make([]*patchCursor, len(s.tensors))
	for i, t := range s.tensors {
		cursors[i] = p.newCursor(t.plan)
	}
	buf := make([]byte, chunkSize)
	front := 0 // first tensor that may still have changes to apply
	for off := int64(0); off < size-s.dataStart; off += chunkSize {
		chunk := buf[:min(chunkSize, size-s.dataStart-off)]
		if err := readFull(target, chunk, s.dataStart+off); err != nil {
			return s, fmt.Errorf("read %s at %d: %w", name, s.dataStart+off, err)
		}
		in.Write(chunk)
		end := off + int64(len(chunk))
		for i := front; i < len(s.tensors) && s.tensors[i].target.Begin < end; i++ {
			done, err := patchChunk(cursors[i], s.tensors[i].target.Begin, chunk, off)
			if err != nil {
				return s, err
			}
			if done && i == front {
				front++
			}
		}
		out.Write(chunk)
	}
	copy(s.input[:], in.Sum(nil))
	copy(s.output[:], out.Sum(nil))
	return s, nil
}

// patchChunk writes into chunk (the data section bytes [off, off+len(chunk))) every change
// of the cursor's tensor (whose data starts at data offset begin) that overlaps it. An element
// cut by the chunk's end is written in part and kept for the next chunk. done reports that
// the cursor has no changes left.
func patchChunk(c *patchCursor, begin int64, chunk []byte, off int64) (done bool, err error) {
	end := off + int64(len(chunk))
	width := int64(c.width)
	for {
		idx, val, ok, err := c.cur()
		if err != nil || !ok {
			return !ok, err
		}
		pos := begin + idx*width
		if pos >= end {
			return false, nil
		}
		lo, hi := max(pos, off), min(pos+width, end)
		copy(chunk[lo-off:hi-off], val[lo-pos:hi-pos])
		if pos+width > end {
			return false, nil
		}
		c.advance()
	}
}

// maxRun bounds one coalesced write.
const maxRun = 1 << 20

// writeChanges writes every changed element to the target, one WriteAt per run of adjacent
// elements.
func writeChanges(p *Patch, s scanResult, target io.WriterAt, res *ApplyResult, cfg applyConfig) error {
	var run []byte
	var runAt int64
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		if _, err := target.WriteAt(run, runAt); err != nil {
			return err
		}
		res.Writes++
		run = run[:0]
		return cfg.fail(stepWroteRun)
	}
	for _, t := range s.tensors {
		c := p.newCursor(t.plan)
		for {
			idx, val, ok, err := c.next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			at := s.dataStart + t.target.Begin + idx*int64(c.width)
			if len(run) > 0 && (at != runAt+int64(len(run)) || len(run) >= maxRun) {
				if err := flush(); err != nil {
					return err
				}
			}
			if len(run) == 0 {
				runAt = at
			}
			run = append(run, val...)
			res.ElementsWritten++
		}
	}
	return flush()
}

// applyPatchReference is the simple reference of ApplyPatch for tests: the whole file in
// memory, every change copied in, no journal.
func applyPatchReference(p *Patch, file []byte, name string) ([]byte, error) {
	h, err := ParseHeader(file, int64(len(file)))
	if err != nil {
		return nil, err
	}
	out := bytes.Clone(file)
	for _, t := range p.TensorsOf(name) {
		th, ok := h.Tensor(t.Name)
		if !ok || th.DType != t.DType || th.Elements() != t.Elements {
			return nil, fmt.Errorf("%w: no tensor %q", ErrBaseMismatch, t.Name)
		}
		c := p.newCursor(t)
		for {
			idx, val, ok, err := c.next()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			copy(out[h.DataStart()+th.Begin+idx*int64(len(val)):], val)
		}
	}
	return out, nil
}
