package store

import (
	"fmt"
	"io/fs"
	"slices"
)

// AddStream adds the file a closed stream received as path (which may differ from the
// stream's hint: the file was renamed). Adding a path again replaces the earlier file.
//
// The stream diffed each tensor against the base it found under its hint in the version that
// was the latest when it started. When the batch path would choose otherwise now (a version
// was sealed since, or the new path picks other bases), or the stream's guess of the file's
// class was wrong, the file is ingested again through the batch path, read from the objects
// the stream stored: the result is always what AddFile would give.
func (w *Writer) AddStream(p string, st *FileStream, mode fs.FileMode) error {
	if err := checkPath(p); err != nil {
		return err
	}
	if err := w.checkLive(); err != nil {
		return err
	}
	st.mu.Lock()
	if st.w != w || st.state != streamClosed {
		st.mu.Unlock()
		return fmt.Errorf("add %s: the stream is not a closed stream of version %d: %w", p, w.v, ErrStreamStopped)
	}
	entry := st.wk.entry
	entry.Tensors = slices.Clone(entry.Tensors)
	redo := st.redo || !w.sameBases(st, p, &entry)
	st.mu.Unlock()
	if redo {
		r := st.resultReader()
		return w.AddFile(p, r, r.Size(), mode)
	}
	entry.Path, entry.Mode = p, uint32(mode.Perm())
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return fmt.Errorf("version %d: %w", w.v, ErrWriterDone)
	}
	if _, isDir := w.dirs[p]; isDir {
		return fmt.Errorf("add %s: a directory of that name exists: %w", p, ErrBadPath)
	}
	w.files[p] = &entry
	w.markStreamedLocked(p, true)
	return nil
}

// sameBases reports whether the batch path, adding the stream's file as p now, would diff
// every tensor against the base the stream used.
func (w *Writer) sameBases(st *FileStream, p string, e *manifestFile) bool {
	if e.Kind != kindSafetensors || len(e.Tensors) == 0 {
		return true // a header or a blob has no base
	}
	latest, err := w.s.versions.latestVersion()
	if err != nil {
		return false
	}
	if latest == nil || st.basis == nil {
		return latest == nil && st.basis == nil
	}
	if latest.m.Version != st.basis.m.Version {
		return false
	}
	if p == st.hint {
		return true
	}
	for i := range e.Tensors {
		t := &e.Tensors[i]
		was, ok1 := latest.findBase(st.hint, t.Name, t.DType, t.Shape)
		now, ok2 := latest.findBase(p, t.Name, t.DType, t.Shape)
		if ok1 != ok2 || ok1 && was.tensor.ID != now.tensor.ID {
			return false
		}
	}
	return true
}

// Reset forgets every file and directory added, so that a seal that failed can be retried
// with the tree as it is then; objects already stored stay held, and streams stay usable.
func (w *Writer) Reset() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return fmt.Errorf("version %d: %w", w.v, ErrWriterDone)
	}
	w.files = map[string]*manifestFile{}
	w.dirs = map[string]uint32{}
	return nil
}

// MaterializeInBackground makes Seal return as soon as the version is durable and visible,
// and bring the materialized copy forward afterwards, in the background (the mount: a seal's
// latency is the trainer's). Until the copy is there, reads replay deltas, and the next
// stream or AddFile waits for it.
func (w *Writer) MaterializeInBackground() {
	w.mu.Lock()
	w.bgMaterialize = true
	w.mu.Unlock()
}
