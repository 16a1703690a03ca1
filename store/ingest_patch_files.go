package store

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/weightfs/weightfs/delta"
)

// The files a patch changes by tensor, each on the fast path (ingest_patch_fast.go: one pass,
// or split over goroutines, ingest_patch_split.go) or else the reference path
// (ingest_patch.go), several files at once.

// addPatchedFiles adds the files the patch changes by tensor, several at once (each file's
// pass is sequential: its SHA-256 is one stream), each by the fast path unless it does not
// apply (or ingester.patchReference says so), then by the reference path. The first error
// in the patch's file order is returned.
func (w *Writer) addPatchedFiles(p *delta.Patch, files []delta.PatchFile, base *version) error {
	errs := make([]error, len(files))
	procs := runtime.GOMAXPROCS(0)
	tokens := make(chan struct{}, max(1, min(procs, len(files))))
	// The cores the files leave free make each file's tensors at once, one of them the
	// file's hash: the split pass costs more CPU (ingest_patch_split.go), so it is taken only
	// where a file gets three cores or more (cores, not Ps: a mount runs 2 Ps a core).
	split := w.in.patchSplit
	if split == 0 && len(files) > 0 {
		split = min(procs, runtime.NumCPU())/len(files) - 1
		if w.in.mem.holds(base.m.Version) {
			// The tensors' bytes are handed to the hasher in memory (ingest_patch_hand.go):
			// the split costs about the one pass's CPU, so every core a file gets makes
			// its tensors.
			split = min(procs, runtime.NumCPU()) / len(files)
		}
	}
	var wg sync.WaitGroup
	for i, pf := range files {
		tokens <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-tokens; wg.Done() }()
			if err := w.addPatched(p, pf, base.m.Version, base.files[pf.Name], split); err != nil {
				errs[i] = fmt.Errorf("file %s: %w", pf.Name, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// addPatched adds one file the patch changes by tensor: by the fast path, made again when
// the base in memory failed its check (it is dropped: the copy is read) or the copy was found
// damaged (it is rebuilt first); by the reference path where the fast one does not apply.
func (w *Writer) addPatched(p *delta.Patch, pf delta.PatchFile, baseV uint64, bf *manifestFile, workers int) error {
	err := errPatchSlow
	for try := 0; !w.in.patchReference; try++ {
		err = w.addPatchedFileFast(p, pf, baseV, bf, workers)
		if err == nil || try == 2 {
			break
		}
		if w.s.mat.isBroken() {
			if err := w.s.mat.ensure(); err != nil {
				return err
			}
			continue
		}
		if !errors.Is(err, errMemBase) {
			break
		}
	}
	if !errors.Is(err, errPatchSlow) {
		return err
	}
	err = w.addPatchedFile(p, pf, baseV, bf)
	if err != nil && w.s.mat.isBroken() {
		// The materialized copy was damaged under us: rebuild it and try once more.
		if err := w.s.mat.ensure(); err != nil {
			return err
		}
		err = w.addPatchedFile(p, pf, baseV, bf)
	}
	return err
}
