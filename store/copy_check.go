package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
)

// Checking the files of the copy patched in place while the patches run (copy_forward.go
// brings the copy forward): a file's bytes are final below the start of the next patch of it
// that has not run, so one goroutine hashes each patched file up to that mark while another
// patches further on. The check is the one copySums would make afterwards (the file's SHA-256
// and, from the same bytes, its sums); made beside the patches, a reader's new version is
// shown sooner (docs/design.md, "A reader shows a version once its copy holds it").

// errCheckStopped is the check's answer when the patches stopped first.
var errCheckStopped = errors.New("the update stopped")

// patchCheck hashes the files that patches (sorted by path, then offset) change in place,
// following the patches' progress.
type patchCheck struct {
	patches []inPlace
	mu      sync.Mutex
	cond    sync.Cond
	final   map[string]int64 // bytes of each patched file below this offset are final
	stopped bool
}

func newPatchCheck(patches []inPlace) *patchCheck {
	c := &patchCheck{patches: patches, final: map[string]int64{}}
	c.cond.L = &c.mu
	for i := len(patches) - 1; i >= 0; i-- {
		c.final[patches[i].path] = patches[i].off // the first patch of each file
	}
	return c
}

// done says patch i has been written: the file is final up to its next patch, or to its end.
func (c *patchCheck) done(i int, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.patches[i].path
	if i+1 < len(c.patches) && c.patches[i+1].path == p {
		c.final[p] = c.patches[i+1].off
	} else {
		c.final[p] = size
	}
	c.cond.Broadcast()
}

// stop ends the check: the patches ended with an error.
func (c *patchCheck) stop() {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.cond.Broadcast()
}

// waitFinal waits until the bytes of path below end are final.
func (c *patchCheck) waitFinal(path string, end int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.final[path] < end && !c.stopped {
		c.cond.Wait()
	}
	if c.stopped {
		return errCheckStopped
	}
	return nil
}

// run checks each patched file of target whose sums are not known against its SHA-256 as its
// bytes become final and notes the sums of those that match (copySums then finds them); the
// first mismatch or error is returned at the end. Files are checked on up to GOMAXPROCS
// goroutines: a file's SHA-256 is one sequential stream, slower than the patches, so with one
// checker the last file's hash would start only when the first's ended (a checkpoint's shards
// are patched one after the other, and each checker follows its own file's patches).
func (c *patchCheck) run(m *materialized, target *version) error {
	var files []*manifestFile
	for i := 0; i < len(c.patches); {
		p := c.patches[i].path
		for i < len(c.patches) && c.patches[i].path == p {
			i++
		}
		f := target.files[p]
		if f == nil || m.contentChecks().sumsOf(keyOf(f)) != nil {
			// Sums known (a writer's, from the bytes the trainer wrote): copySums takes them
			// and reads check the patched bytes against them, as before.
			continue
		}
		files = append(files, f)
	}
	errs := make([]error, len(files))
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, f := range files {
		sem <- struct{}{} // in path order: the file patched first is checked first
		wg.Go(func() {
			defer func() { <-sem }()
			sums, err := c.hashFile(m.path(), f, make([]byte, 1<<20))
			if err == nil {
				m.contentChecks().noteSums(keyOf(f), sums)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if errors.Is(err, errCheckStopped) {
			return err
		}
	}
	return firstNonNil(errs)
}

// firstNonNil returns the first error of errs that is not nil, or nil.
func firstNonNil(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *patchCheck) hashFile(dir string, f *manifestFile, buf []byte) (*fileSums, error) {
	in, err := openIn(dir, f.Path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("materialized copy: %w", err)
	}
	defer in.Close()
	h := sha256.New()
	var sw sumWriter
	for off := int64(0); off < f.Size; {
		n := min(int64(len(buf)), f.Size-off)
		if err := c.waitFinal(f.Path, off+n); err != nil {
			return nil, err
		}
		b := buf[:n]
		if err := readFull(in, b, off); err != nil {
			return nil, fmt.Errorf("materialized %s: %w", f.Path, err)
		}
		h.Write(b)
		sw.Write(b)
		off += n
	}
	if got := h.Sum(nil); !bytes.Equal(got, f.SHA256[:]) {
		return nil, fmt.Errorf("materialized %s: brought forward, it hashes to %x, the manifest says %s: %w", f.Path, got, f.SHA256, ErrCorrupt)
	}
	return sw.sums(), nil
}
