package gen

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
)

// tensorSource produces the stored bytes of elements [lo, hi) of tensor ti (state_dict index)
// into dst ((hi-lo) times the element size). It is called concurrently, each worker with its
// own scratch.
type tensorSource func(s *scratch, ti int, lo, hi int64, dst []byte)

// writeBufBytes is the size of every write(2) of a safetensors file but the last. Trainers
// write checkpoints in large sequential pieces; FUSE benchmarks measure exactly this pattern.
const writeBufBytes = 4 << 20

// sink creates the files of a checkpoint: on disk, or in memory for CheckpointFiles.
type sink interface {
	create(name string) (io.WriteCloser, error)
	discard(name string) // remove a file whose writing failed
}

// writeCheckpoint writes all files of a checkpoint into dir (created if missing) and returns
// the number of bytes written. Files are written in save_pretrained's order: config.json,
// generation_config.json, the weights, then the index.
func writeCheckpoint(dir string, cfg Config, lay *layout, src tensorSource) (int64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("create checkpoint directory: %w", err)
	}
	return writeFiles(dirSink(dir), cfg, lay, src)
}

// checkpointFiles returns a checkpoint's files in memory.
func checkpointFiles(cfg Config, lay *layout, src tensorSource) (map[string][]byte, error) {
	mem := memSink{}
	if _, err := writeFiles(mem, cfg, lay, src); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(mem))
	for name, b := range mem {
		out[name] = b.Bytes()
	}
	return out, nil
}

func writeFiles(sk sink, cfg Config, lay *layout, src tensorSource) (int64, error) {
	var total int64
	small := func(name string, content func() ([]byte, error)) error {
		b, err := content()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		n, err := writeWhole(sk, name, func(w io.Writer) (int64, error) {
			n, err := w.Write(b)
			return int64(n), err
		})
		total += n
		return err
	}
	if err := small("config.json", func() ([]byte, error) { return configJSON(cfg) }); err != nil {
		return total, err
	}
	if err := small("generation_config.json", generationConfigJSON); err != nil {
		return total, err
	}
	names := lay.fileNames()
	for k, group := range lay.files {
		n, err := writeWhole(sk, names[k], func(w io.Writer) (int64, error) {
			return writeSafetensors(w, cfg.workers(), lay, group, src)
		})
		total += n
		if err != nil {
			return total, err
		}
	}
	if len(lay.files) > 1 {
		if err := small("model.safetensors.index.json", func() ([]byte, error) { return indexJSON(lay) }); err != nil {
			return total, err
		}
	}
	return total, nil
}

// writeWhole creates name, fills it with write and closes it, checking every error (the
// close of a file on a FUSE mount can report a failed flush). A failed file is removed.
func writeWhole(sk sink, name string, write func(io.Writer) (int64, error)) (int64, error) {
	f, err := sk.create(name)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", name, err)
	}
	n, err := write(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		sk.discard(name)
		return n, fmt.Errorf("write %s: %w", name, err)
	}
	return n, nil
}

// piece is a range of one tensor's elements and where its bytes go in the file.
type piece struct {
	tensor int
	lo, hi int64 // elements
	off    int64 // file offset of element lo
}

// writeSafetensors writes one safetensors file sequentially in writeBufBytes pieces. Each
// buffer is filled by all workers in parallel while the previous one is being written.
func writeSafetensors(w io.Writer, workers int, lay *layout, group []int, src tensorSource) (int64, error) {
	header := safetensorsHeader(lay, group)
	size := safetensorsSize(lay, group, header)

	// Cut the data into pieces of at most chunkElems elements, in file order.
	var pieces []piece
	off := int64(len(header))
	for _, ti := range group {
		t := &lay.tensors[ti]
		for lo := int64(0); lo < t.numel; lo += chunkElems {
			hi := min(lo+chunkElems, t.numel)
			pieces = append(pieces, piece{ti, lo, hi, off + t.dtype.size()*lo})
		}
		off += t.bytes()
	}

	scratches := make([]scratch, max(workers, 1))
	free := make(chan []byte, 2)
	free <- make([]byte, writeBufBytes)
	free <- make([]byte, writeBufBytes)
	full := make(chan []byte)
	var failed atomic.Bool
	done := make(chan error, 1)
	var written int64
	go func() {
		var err error
		for b := range full {
			if err == nil {
				var n int
				n, err = w.Write(b)
				written += int64(n)
				if err != nil {
					failed.Store(true)
				}
			}
			free <- b[:cap(b)]
		}
		done <- err
	}()

	next := 0 // first piece not yet entirely written
	for pos := int64(0); pos < size && !failed.Load(); pos += writeBufBytes {
		buf := <-free
		end := min(pos+writeBufBytes, size)
		buf = buf[:end-pos]
		if pos < int64(len(header)) {
			copy(buf, header[pos:])
		}
		// The pieces that overlap [pos, end), clipped to it: the elements that cover the
		// clipped bytes. In a bf16 file offsets are even (the header length is a multiple of
		// 8), so clipping never splits an element; an F32 after an odd-sized fp8 tensor can
		// be split, and then its elements are made aside and the bytes in range copied.
		var jobs []clip
		for i := next; i < len(pieces) && pieces[i].off < end; i++ {
			p := pieces[i]
			size := lay.tensors[p.tensor].dtype.size()
			pEnd := p.off + size*(p.hi-p.lo)
			c := clip{piece: p, from: max(p.off, pos), to: min(pEnd, end)}
			c.lo = p.lo + (c.from-p.off)/size
			c.hi = p.lo + (c.to-p.off+size-1)/size
			c.off = p.off + size*(c.lo-p.lo)
			if pEnd <= end {
				next = i + 1
			}
			jobs = append(jobs, c)
		}
		parallelFor(workers, len(jobs), func(wk, j int) {
			c := jobs[j]
			n := lay.tensors[c.tensor].dtype.size() * (c.hi - c.lo)
			if c.off == c.from && c.off+n == c.to {
				src(&scratches[wk], c.tensor, c.lo, c.hi, buf[c.from-pos:c.to-pos])
				return
			}
			tmp := scratches[wk].bytes(int(n))
			src(&scratches[wk], c.tensor, c.lo, c.hi, tmp)
			copy(buf[c.from-pos:c.to-pos], tmp[c.from-c.off:])
		})
		full <- buf
	}
	close(full)
	err := <-done
	return written, err
}

// clip is a piece cut to one write buffer: elements [lo, hi), whose bytes start at file offset
// off, cover the buffer's bytes [from, to) of the piece.
type clip struct {
	piece
	from, to int64
}

// dirSink creates files in a directory.
type dirSink string

func (d dirSink) create(name string) (io.WriteCloser, error) {
	return os.Create(filepath.Join(string(d), name))
}

// discard removes a partly written file; its own failure is secondary to the write error
// being reported.
func (d dirSink) discard(name string) { _ = os.Remove(filepath.Join(string(d), name)) }

// memSink keeps files in memory.
type memSink map[string]*bytes.Buffer

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

func (m memSink) create(name string) (io.WriteCloser, error) {
	b := &bytes.Buffer{}
	m[name] = b
	return nopCloser{b}, nil
}

func (m memSink) discard(name string) { delete(m, name) }
