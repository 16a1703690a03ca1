package delta

import (
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// The streaming writer of the one-file sparse patch.

// PatchWriter writes a patch file through an io.WriterAt, holding only small buffers: the
// header goes first, then the caller feeds each tensor's changes in plan order (Add, in as
// many pieces as it likes) and then each whole file's bytes (AddWhole). Equal input gives
// equal bytes. The writer is unusable after its first error. Not safe for concurrent use; its
// Parts are, each on its own goroutine.
type PatchWriter struct {
	w        io.WriterAt
	plan     PatchPlan
	entries  []Tensor // from EncodeHeader: offsets relative to dataStart
	dataOff  int64
	size     int64
	tensor   int   // index into plan.Tensors of the tensor being fed
	end      int   // tensors [.., end) are this writer's: all of them, or a Part's
	part     bool  // a Part: no whole files
	fed      int64 // changes fed to the current tensor
	lastIdx  int64 // last index fed to the current tensor, -1 before the first
	whole    int   // index into plan.Files of the next whole file to feed
	wholeFed int64
	idxBuf   []byte
	valBuf   []byte
	idxAt    int64 // file offset where idxBuf starts
	valAt    int64
	err      error
}

// patchBufSize bounds each of the writer's two buffers.
const patchBufSize = 1 << 20

// NewPatchWriter validates plan and writes the patch header at offset 0 of w.
func NewPatchWriter(w io.WriterAt, plan PatchPlan) (*PatchWriter, error) {
	plan.Files = append([]PatchFile(nil), plan.Files...)
	plan.Tensors = append([]PatchTensor(nil), plan.Tensors...)
	header, entries, err := encodePatchHeader(plan)
	if err != nil {
		return nil, err
	}
	if _, err := w.WriteAt(header, 0); err != nil {
		return nil, fmt.Errorf("write patch header: %w", err)
	}
	pw := &PatchWriter{w: w, plan: plan, entries: entries, dataOff: int64(len(header)), size: int64(len(header)), lastIdx: -1,
		end: len(plan.Tensors)}
	if n := len(entries); n > 0 {
		pw.size += entries[n-1].End
	}
	// New headers are in the plan already (they are small): they go out with the header.
	for _, f := range plan.Files {
		if f.NewHeader == nil {
			continue
		}
		for _, e := range entries {
			if e.Name == HeaderPrefix+f.Name {
				if _, err := w.WriteAt(f.NewHeader, pw.dataOff+e.Begin); err != nil {
					return nil, fmt.Errorf("write new header of %q into patch: %w", f.Name, err)
				}
			}
		}
	}
	pw.startTensor()
	return pw, nil
}

// Parts hands the tensors [bounds[0], bounds[len-1]) of the plan, which must be the next
// ones to feed, to writers of their own: part i feeds tensors [bounds[i], bounds[i+1]). The
// plan fixes where every tensor's indices and values go, so parts write disjoint regions of
// w and may be fed on different goroutines when w allows concurrent WriteAt (an *os.File
// does). pw moves past those tensors; each part must be fed and closed.
func (pw *PatchWriter) Parts(bounds []int) ([]*PatchWriter, error) {
	if pw.err != nil {
		return nil, pw.err
	}
	if len(bounds) < 2 || bounds[0] != pw.tensor || pw.fed != 0 || bounds[len(bounds)-1] > pw.end || !slices.IsSorted(bounds) {
		return nil, pw.fail(fmt.Errorf("patch writer: parts %v from tensor %d (%d fed) of %d", bounds, pw.tensor, pw.fed, pw.end))
	}
	parts := make([]*PatchWriter, len(bounds)-1)
	for i := range parts {
		parts[i] = &PatchWriter{w: pw.w, plan: pw.plan, entries: pw.entries, dataOff: pw.dataOff, size: pw.size,
			tensor: bounds[i], end: bounds[i+1], part: true, lastIdx: -1}
		parts[i].startTensor()
	}
	pw.tensor = bounds[len(bounds)-1]
	pw.startTensor()
	return parts, nil
}

// Size is the size of the finished patch file.
func (pw *PatchWriter) Size() int64 { return pw.size }

// startTensor points the buffers at the current tensor's indices and values.
func (pw *PatchWriter) startTensor() {
	pw.fed, pw.lastIdx = 0, -1
	if pw.tensor < len(pw.plan.Tensors) {
		pw.idxAt = pw.dataOff + pw.entries[2*pw.tensor].Begin
		pw.valAt = pw.dataOff + pw.entries[2*pw.tensor+1].Begin
	}
}

func (pw *PatchWriter) fail(err error) error {
	if pw.err == nil {
		pw.err = err
	}
	return pw.err
}

// Add feeds changes of the current tensor: element first+idx[i] takes the value
// values[i*w:(i+1)*w], w the dtype size. Indices must ascend across calls. A call feeds one
// tensor only; once the tensor's planned count is reached, the next call feeds the next one.
func (pw *PatchWriter) Add(first int64, idx []uint32, values []byte) error {
	if pw.err != nil {
		return pw.err
	}
	if len(idx) == 0 {
		return nil
	}
	if pw.tensor >= pw.end {
		return pw.fail(fmt.Errorf("patch writer: %d changes beyond the planned tensors", len(idx)))
	}
	t := pw.plan.Tensors[pw.tensor]
	width := t.DType.Size()
	if len(values) != len(idx)*width {
		return pw.fail(fmt.Errorf("patch writer: tensor %q: %d bytes of values for %d indices of %d bytes", t.Name, len(values), len(idx), width))
	}
	if int64(len(idx)) > t.Changed-pw.fed {
		return pw.fail(fmt.Errorf("patch writer: tensor %q needs %d more changes, got %d", t.Name, t.Changed-pw.fed, len(idx)))
	}
	wide := t.IndexDType() == DTypeI64
	for _, i := range idx {
		abs := first + int64(i)
		if abs <= pw.lastIdx || abs >= t.Elements {
			return pw.fail(fmt.Errorf("patch writer: tensor %q: index %d after %d is not ascending within %d elements", t.Name, abs, pw.lastIdx, t.Elements))
		}
		pw.lastIdx = abs
		if wide {
			pw.idxBuf = binary.LittleEndian.AppendUint64(pw.idxBuf, uint64(abs))
		} else {
			pw.idxBuf = binary.LittleEndian.AppendUint32(pw.idxBuf, uint32(abs))
		}
		if len(pw.idxBuf) >= patchBufSize {
			if err := pw.flushIndices(); err != nil {
				return err
			}
		}
	}
	pw.valBuf = append(pw.valBuf, values...)
	if len(pw.valBuf) >= patchBufSize {
		if err := pw.flushValues(); err != nil {
			return err
		}
	}
	pw.fed += int64(len(idx))
	if pw.fed == t.Changed {
		if err := pw.flushIndices(); err != nil {
			return err
		}
		if err := pw.flushValues(); err != nil {
			return err
		}
		pw.tensor++
		pw.startTensor()
	}
	return nil
}

func (pw *PatchWriter) flushIndices() error {
	if len(pw.idxBuf) == 0 {
		return nil
	}
	if _, err := pw.w.WriteAt(pw.idxBuf, pw.idxAt); err != nil {
		return pw.fail(fmt.Errorf("write patch indices: %w", err))
	}
	pw.idxAt += int64(len(pw.idxBuf))
	pw.idxBuf = pw.idxBuf[:0]
	return nil
}

func (pw *PatchWriter) flushValues() error {
	if len(pw.valBuf) == 0 {
		return nil
	}
	if _, err := pw.w.WriteAt(pw.valBuf, pw.valAt); err != nil {
		return pw.fail(fmt.Errorf("write patch values: %w", err))
	}
	pw.valAt += int64(len(pw.valBuf))
	pw.valBuf = pw.valBuf[:0]
	return nil
}

// AddWhole feeds bytes of the whole files, in plan order, after every tensor is complete.
func (pw *PatchWriter) AddWhole(data []byte) error {
	if pw.err != nil {
		return pw.err
	}
	if pw.tensor < len(pw.plan.Tensors) {
		return pw.fail(fmt.Errorf("patch writer: whole-file data before tensor %q is complete", pw.plan.Tensors[pw.tensor].Name))
	}
	for len(data) > 0 {
		f, ok := pw.nextWhole()
		if !ok {
			return pw.fail(fmt.Errorf("patch writer: %d bytes beyond the planned whole files", len(data)))
		}
		n := min(int64(len(data)), f.WholeSize-pw.wholeFed)
		entry, _ := pw.wholeEntry(f.Name)
		if _, err := pw.w.WriteAt(data[:n], pw.dataOff+entry.Begin+pw.wholeFed); err != nil {
			return pw.fail(fmt.Errorf("write whole file %q into patch: %w", f.Name, err))
		}
		pw.wholeFed += n
		data = data[n:]
	}
	return nil
}

// nextWhole returns the whole file being fed, moving past files already complete.
func (pw *PatchWriter) nextWhole() (PatchFile, bool) {
	for ; pw.whole < len(pw.plan.Files); pw.whole++ {
		f := pw.plan.Files[pw.whole]
		if !f.Whole {
			continue
		}
		if pw.wholeFed < f.WholeSize {
			return f, true
		}
		pw.wholeFed = 0 // f is complete; the next whole file starts from its first byte
	}
	return PatchFile{}, false
}

func (pw *PatchWriter) wholeEntry(name string) (Tensor, bool) {
	for _, e := range pw.entries {
		if e.Name == WholeFilePrefix+name {
			return e, true
		}
	}
	return Tensor{}, false
}

// Close checks that everything planned was fed. It does not close or sync w.
func (pw *PatchWriter) Close() error {
	if pw.err != nil {
		return pw.err
	}
	if pw.tensor < pw.end {
		t := pw.plan.Tensors[pw.tensor]
		return pw.fail(fmt.Errorf("patch writer: tensor %q got %d of %d changes", t.Name, pw.fed, t.Changed))
	}
	if f, ok := pw.nextWhole(); ok && !pw.part {
		return pw.fail(fmt.Errorf("patch writer: whole file %q got %d of %d bytes", f.Name, pw.wholeFed, f.WholeSize))
	}
	pw.err = fmt.Errorf("patch writer: closed")
	return nil
}
