package gpu

import (
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/weightfs/weightfs/delta"
)

//go:embed kernel.cl
var kernelSource string

// Kernel geometry, fixed when the program is built (-DWG, -DITEM_BYTES).
const (
	workGroupSize = 128                       // work-items per group; a power of two
	itemBytes     = 64                        // contiguous bytes per work-item; multiple of 16
	tileBytes     = workGroupSize * itemBytes // bytes per work-group
	maxChunkBytes = 1 << 30                   // keeps every in-kernel byte offset below 2^32
	slotCount     = 2                         // buffer sets: one uploads while the other computes
	buildOptions  = "-cl-std=CL1.2 -DWG=128 -DITEM_BYTES=64"
)

// DefaultChunkBytes is the slice of the input one kernel pass handles when Options.ChunkBytes
// is zero. Small enough that the store's 4 MiB calls still stream through both buffer sets,
// large enough that three kernel launches per chunk cost little next to the transfer.
const DefaultChunkBytes = 2 << 20

// DeviceMemoryNeeded is the device memory the OpenCL backend allocates for chunkBytes-sized
// chunks: per buffer set the two inputs, the worst-case outputs (every element of width 1
// changed: 4 bytes of index and 1 of value per input byte) and the per-tile counts and offsets.
func DeviceMemoryNeeded(chunkBytes int) uint64 {
	chunk := uint64(normalizeChunk(chunkBytes))
	groups := (chunk + tileBytes - 1) / tileBytes
	perSlot := 2*chunk + 4*chunk + chunk + 4*groups + 4*(groups+1)
	return slotCount * perSlot
}

// normalizeChunk rounds a requested chunk size to a whole number of tiles in [1 tile, 1 GiB].
func normalizeChunk(chunkBytes int) int {
	if chunkBytes <= 0 {
		chunkBytes = DefaultChunkBytes
	}
	chunkBytes = min(chunkBytes, maxChunkBytes)
	return max(tileBytes, chunkBytes/tileBytes*tileBytes)
}

// OpenCLBackend is the delta.DiffBackend that runs kernel.cl on one OpenCL device. It is safe
// for concurrent use; calls are serialised. Close releases the device memory.
type OpenCLBackend struct {
	mu     sync.Mutex
	lib    *clLib
	device CLDevice
	chunk  int
	ctx    uintptr
	prog   uintptr
	slots  [slotCount]clSlot
	closed bool
}

// clSlot is one buffer set with its own in-order queue and kernel objects, so that work on the
// two slots proceeds independently on the device.
type clSlot struct {
	queue                            uintptr
	base, cur, counts, offsets       uintptr
	idx, vals                        uintptr
	countKernel, scanKernel, scatter uintptr
}

var _ delta.DiffBackend = (*OpenCLBackend)(nil)

// newOpenCLBackend builds the kernel for dev and allocates both buffer sets.
func newOpenCLBackend(lib *clLib, dev CLDevice, chunkBytes int) (_ *OpenCLBackend, err error) {
	if !hostLittleEndian() || !dev.LittleEndian {
		return nil, fmt.Errorf("%w: %s: indices are read back raw, which needs a little-endian host and device", ErrNoDevice, dev)
	}
	if !dev.Available || !dev.Compiler {
		return nil, fmt.Errorf("%w: %s is not available or cannot compile kernels", ErrNoDevice, dev)
	}
	b := &OpenCLBackend{lib: lib, device: dev, chunk: normalizeChunk(chunkBytes)}
	defer func() {
		if err != nil {
			b.release()
		}
	}()
	if uint64(4*b.chunk) > dev.MaxAlloc {
		return nil, fmt.Errorf("%w: %s allocates at most %d bytes per buffer, the diff needs %d", ErrNoRoom, dev, dev.MaxAlloc, 4*b.chunk)
	}
	if b.ctx, err = lib.createContext(dev.platformID, dev.deviceID); err != nil {
		return nil, fmt.Errorf("create context on %s: %w", dev, err)
	}
	if b.prog, err = lib.buildProgram(b.ctx, dev.deviceID, kernelSource, buildOptions); err != nil {
		return nil, fmt.Errorf("build the diff kernel for %s: %w", dev, err)
	}
	for i := range b.slots {
		if err := b.initSlot(&b.slots[i]); err != nil {
			return nil, fmt.Errorf("set up buffer set %d on %s: %w", i, dev, err)
		}
	}
	return b, nil
}

func (b *OpenCLBackend) initSlot(s *clSlot) error {
	var err error
	if s.queue, err = b.lib.createQueue(b.ctx, b.device.deviceID); err != nil {
		return err
	}
	groups := (b.chunk + tileBytes - 1) / tileBytes
	for _, m := range []struct {
		dst   *uintptr
		flags uint64
		size  int
	}{
		{&s.base, clMemReadOnly, b.chunk}, {&s.cur, clMemReadOnly, b.chunk},
		{&s.counts, clMemReadWrite, 4 * groups}, {&s.offsets, clMemReadWrite, 4 * (groups + 1)},
		{&s.idx, clMemWriteOnly, 4 * b.chunk}, {&s.vals, clMemWriteOnly, b.chunk},
	} {
		if *m.dst, err = b.lib.createBuffer(b.ctx, m.flags, m.size); err != nil {
			return err
		}
	}
	for _, k := range []struct {
		dst  *uintptr
		name string
	}{{&s.countKernel, "count_changes"}, {&s.scanKernel, "scan_counts"}, {&s.scatter, "scatter_changes"}} {
		if *k.dst, err = b.lib.createKernel(b.prog, k.name); err != nil {
			return err
		}
		wg, err := b.lib.kernelWorkGroupSize(*k.dst, b.device.deviceID)
		if err != nil {
			return err
		}
		if wg < workGroupSize {
			return fmt.Errorf("%w: kernel %s runs at most %d work-items per group on this device, it needs %d", ErrNoDevice, k.name, wg, workGroupSize)
		}
	}
	return nil
}

// Name reports the backend and the device it runs on.
func (b *OpenCLBackend) Name() string {
	return fmt.Sprintf("opencl (%s)", b.device)
}

// Device is the OpenCL device the backend runs on.
func (b *OpenCLBackend) Device() CLDevice { return b.device }

// ChunkBytes is the size of the chunks the input is cut into.
func (b *OpenCLBackend) ChunkBytes() int { return b.chunk }

// Close releases the device's buffers, kernels, queues and context. Later calls of Diff fail
// with ErrClosed; Close itself may be called again.
func (b *OpenCLBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.release()
		b.closed = true
	}
	return nil
}

func (b *OpenCLBackend) release() {
	for i := range b.slots {
		s := &b.slots[i]
		if s.queue != 0 {
			_ = b.lib.finish(s.queue) // nothing may still use the buffers released below
		}
		for _, k := range []uintptr{s.countKernel, s.scanKernel, s.scatter} {
			b.lib.release(relKernel, k)
		}
		for _, m := range []uintptr{s.base, s.cur, s.counts, s.offsets, s.idx, s.vals} {
			b.lib.release(relMem, m)
		}
		b.lib.release(relQueue, s.queue)
		*s = clSlot{}
	}
	b.lib.release(relProgram, b.prog)
	b.lib.release(relContext, b.ctx)
	b.prog, b.ctx = 0, 0
}

// checkDiffArgs enforces the delta.DiffBackend contract on Diff's arguments.
func checkDiffArgs(base, cur []byte, width int, out *delta.Changes) error {
	switch {
	case out == nil:
		return fmt.Errorf("%w: nil output", delta.ErrInvalidArgument)
	case width != 1 && width != 2 && width != 4 && width != 8:
		return fmt.Errorf("%w: element width %d, want 1, 2, 4 or 8", delta.ErrInvalidArgument, width)
	case len(base) != len(cur):
		return fmt.Errorf("%w: base is %d bytes, cur %d", delta.ErrInvalidArgument, len(base), len(cur))
	case len(base)%width != 0:
		return fmt.Errorf("%w: %d bytes is not a whole number of %d-byte elements", delta.ErrInvalidArgument, len(base), width)
	case uint64(len(base)/width) > math.MaxUint32:
		return fmt.Errorf("%w: %d elements, at most 2^32-1 per call", delta.ErrInvalidArgument, len(base)/width)
	}
	return nil
}

// Diff implements delta.DiffBackend on the device: chunk k+1 is uploaded and its kernels
// queued on one buffer set while the results of chunk k are read back from the other.
func (b *OpenCLBackend) Diff(base, cur []byte, width int, out *delta.Changes) (err error) {
	if err := checkDiffArgs(base, cur, width, out); err != nil {
		return err
	}
	if len(base) == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	// The uploads are asynchronous, so OpenCL holds pointers into base and cur after the
	// enqueue call returns: cgo allows that only for pinned memory.
	var pinner runtime.Pinner
	pinner.Pin(&base[0])
	pinner.Pin(&cur[0])
	keepIndex, keepValues := len(out.Index), len(out.Values)
	defer func() {
		for i := range b.slots {
			if ferr := b.lib.finish(b.slots[i].queue); ferr != nil && err == nil {
				err = fmt.Errorf("finish the diff on %s: %w", b.device, ferr)
			}
		}
		pinner.Unpin()
		if err != nil {
			out.Index, out.Values = out.Index[:keepIndex], out.Values[:keepValues]
		}
	}()

	chunks := (len(base) + b.chunk - 1) / b.chunk
	if err := b.submit(0, base, cur, width); err != nil {
		return err
	}
	for k := 0; k < chunks; k++ {
		if k+1 < chunks {
			if err := b.submit(k+1, base, cur, width); err != nil {
				return err
			}
		}
		if err := b.collect(k, len(base), width, out); err != nil {
			return err
		}
	}
	return nil
}

// chunkSpan is where chunk k lies in an input of total bytes.
func (b *OpenCLBackend) chunkSpan(k, total int) (off, n, groups int) {
	off = k * b.chunk
	n = min(b.chunk, total-off)
	return off, n, (n + tileBytes - 1) / tileBytes
}

// submit queues the upload and the three kernels of chunk k on buffer set k%2.
func (b *OpenCLBackend) submit(k int, base, cur []byte, width int) error {
	s := &b.slots[k%slotCount]
	off, n, groups := b.chunkSpan(k, len(base))
	first := uint32(off / width)
	l := b.lib
	steps := []func() error{
		func() error { return l.writeBuffer(s.queue, s.base, false, 0, base[off:off+n]) },
		func() error { return l.writeBuffer(s.queue, s.cur, false, 0, cur[off:off+n]) },
		func() error { return l.setArgMem(s.countKernel, 0, s.base) },
		func() error { return l.setArgMem(s.countKernel, 1, s.cur) },
		func() error { return l.setArgUint(s.countKernel, 2, uint32(n)) },
		func() error { return l.setArgUint(s.countKernel, 3, uint32(width)) },
		func() error { return l.setArgMem(s.countKernel, 4, s.counts) },
		func() error { return l.run1D(s.queue, s.countKernel, groups*workGroupSize, workGroupSize) },
		func() error { return l.setArgMem(s.scanKernel, 0, s.counts) },
		func() error { return l.setArgUint(s.scanKernel, 1, uint32(groups)) },
		func() error { return l.setArgMem(s.scanKernel, 2, s.offsets) },
		func() error { return l.run1D(s.queue, s.scanKernel, workGroupSize, workGroupSize) },
		func() error { return l.setArgMem(s.scatter, 0, s.base) },
		func() error { return l.setArgMem(s.scatter, 1, s.cur) },
		func() error { return l.setArgUint(s.scatter, 2, uint32(n)) },
		func() error { return l.setArgUint(s.scatter, 3, uint32(width)) },
		func() error { return l.setArgUint(s.scatter, 4, first) },
		func() error { return l.setArgMem(s.scatter, 5, s.offsets) },
		func() error { return l.setArgMem(s.scatter, 6, s.idx) },
		func() error { return l.setArgMem(s.scatter, 7, s.vals) },
		func() error { return l.run1D(s.queue, s.scatter, groups*workGroupSize, workGroupSize) },
		func() error { return l.flush(s.queue) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("queue chunk %d (bytes %d..%d) on %s: %w", k, off, off+n, b.device, err)
		}
	}
	return nil
}

// collect waits for chunk k and appends its changes to out. The reads block, and a queue is
// in order, so they also wait for the chunk's kernels.
func (b *OpenCLBackend) collect(k, total, width int, out *delta.Changes) error {
	s := &b.slots[k%slotCount]
	off, n, groups := b.chunkSpan(k, total)
	var word [4]byte
	if err := b.lib.readBuffer(s.queue, s.offsets, 4*groups, word[:]); err != nil {
		return fmt.Errorf("read the change count of chunk %d on %s: %w", k, b.device, err)
	}
	changed := int(binary.LittleEndian.Uint32(word[:]))
	if changed > n/width {
		return fmt.Errorf("%w: device reports %d changes in chunk %d of %d elements", ErrOpenCL, changed, k, n/width)
	}
	if changed == 0 {
		return nil
	}
	oldIdx, oldVal := len(out.Index), len(out.Values)
	out.Index = slices.Grow(out.Index, changed)[:oldIdx+changed]
	out.Values = slices.Grow(out.Values, changed*width)[:oldVal+changed*width]
	idxBytes := unsafe.Slice((*byte)(unsafe.Pointer(&out.Index[oldIdx])), 4*changed)
	if err := b.lib.readBuffer(s.queue, s.idx, 0, idxBytes); err != nil {
		return fmt.Errorf("read the positions of chunk %d (bytes %d..%d) on %s: %w", k, off, off+n, b.device, err)
	}
	if err := b.lib.readBuffer(s.queue, s.vals, 0, out.Values[oldVal:]); err != nil {
		return fmt.Errorf("read the values of chunk %d (bytes %d..%d) on %s: %w", k, off, off+n, b.device, err)
	}
	return nil
}

// hostLittleEndian reports whether this machine stores integers little-endian, as the raw
// read-back of uint32 indices into out.Index assumes (the device's order is checked apart).
func hostLittleEndian() bool {
	return binary.NativeEndian.Uint16([]byte{1, 0}) == 1
}
