package store

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/weightfs/weightfs/delta"
)

// Bringing the materialized copy forward from one version to the next in place
// (copy_materialized.go has the copy itself, its rebuild and its checks).

// inPlace is one tensor of a file updated in place: apply the delta of object obj in
// direction dir to the bytes [off, off+size).
type inPlace struct {
	path  string
	off   int64
	size  int64
	width int
	obj   ID
	dir   delta.Direction
}

// forward brings the copy from cur to target: a changed file that a stream left a seed of
// (copy_seed.go) is replaced by the seed; files whose layout is unchanged get their changed
// tensors patched in place from the delta objects linking old and new identities; other
// changed files are written beside and renamed over; files gone are removed.
func (m *materialized) forward(cur, target *version) error {
	defer m.seeds.clearUpTo(target.m.Version)
	var patches []inPlace
	rewrites := map[string]string{} // path -> temporary file, relative to m.dir (reldir.go)
	made := map[string]bool{}       // files made from target's objects (composition checked)
	changed, seeded := 0, 0
	defer func() {
		for _, tmp := range rewrites {
			removeIn(m.dir, tmp)
		}
	}()
	for i := range target.m.Files {
		f := &target.m.Files[i]
		old := cur.files[f.Path]
		if old != nil && old.SHA256 == f.SHA256 && old.Size == f.Size {
			continue
		}
		changed++
		if seed, ok := m.seeds.takePath(f); ok {
			// The bytes a stream received and hashed (copy_seed.go): renamed into place, from
			// a name in the copy's directory (a seed that cannot be moved there is written).
			tmp := ".weightfs-" + filepath.Base(seed)
			if err := moveInto(seed, m.dir, tmp); err == nil {
				rewrites[f.Path] = tmp
				made[f.Path] = true
				seeded++
				continue
			}
		}
		if ps, ok := m.s.patchPlan(old, f); ok {
			patches = append(patches, ps...)
			made[f.Path] = true
			continue
		}
		tmp, err := m.writeTemp(target, f, readOpts{})
		if err != nil {
			return err
		}
		rewrites[f.Path] = tmp
		made[f.Path] = true
	}
	// From here on the copy is neither cur nor target until the end: mark it unclean first.
	if err := m.s.ix.setMaterialized(matState{Version: cur.m.Version}); err != nil {
		return fmt.Errorf("materialized copy: %w", err)
	}
	// Readers let go of the copy and replay until it holds target: the update runs without
	// keeping anyone waiting (ensureMu keeps other updates out).
	m.drop()
	// The files patched in place are checked as the patches go (copy_check.go), in
	// order of path and offset.
	slices.SortFunc(patches, func(a, b inPlace) int {
		return cmp.Or(strings.Compare(a.path, b.path), cmp.Compare(a.off, b.off))
	})
	chk := newPatchCheck(patches)
	checked := make(chan error, 1)
	go func() { checked <- chk.run(m, target) }()
	err := m.apply(cur, target, patches, rewrites, chk)
	if err != nil {
		chk.stop()
	}
	if cerr := <-checked; err == nil && cerr != nil {
		err = cerr
	}
	var sums map[string]*fileSums
	if err == nil {
		// A file patched in place is made of target's objects (each changed tensor by its
		// delta); one left as it was has cur's content, and its composition must be cur's.
		sums, err = m.copySums(target, func(f *manifestFile) bool {
			old := cur.files[f.Path]
			return made[f.Path] || old != nil && composition(old) == composition(f)
		})
	}
	m.mu.Lock()
	m.closeFilesLocked()
	if err == nil {
		m.ver, m.locs, m.sums = target, locsOf(target), sums
		m.crcs.forget(locsOf(cur), m.locs)
	}
	m.gen++
	m.mu.Unlock()
	if err != nil {
		return err
	}
	m.s.log.Debug(fmt.Sprintf("materialized copy: brought forward to version %d (%d of %d changed files as streamed)", target.m.Version, seeded, changed))
	return m.s.ix.setMaterialized(matState{Version: target.m.Version, Clean: true})
}

// apply changes the files of the copy from cur to target. Nobody reads the copy meanwhile.
// chk is told of each patch written.
func (m *materialized) apply(cur, target *version, patches []inPlace, rewrites map[string]string, chk *patchCheck) error {
	var bufs patchBufs
	half := len(patches) / 2
	for i := 0; i < len(patches); {
		if i == half {
			if err := m.s.failpoint("materialize-partial"); err != nil {
				return err
			}
		}
		j := adjacentRun(patches, i, half)
		var err error
		if j == i+1 {
			err = m.patch(patches[i], &bufs)
		} else {
			err = m.patchRun(patches[i:j], &bufs)
		}
		if err != nil {
			return err
		}
		for ; i < j; i++ {
			chk.done(i, target.files[patches[i].path].Size)
		}
	}
	for p, tmp := range rewrites {
		if err := renameIn(m.dir, tmp, p); err != nil {
			return fmt.Errorf("materialized copy: %w", err)
		}
		delete(rewrites, p)
	}
	// Files and directories of cur that target does not have.
	for i := range cur.m.Files {
		p := cur.m.Files[i].Path
		if target.files[p] == nil {
			if err := removeIn(m.dir, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("materialized copy: %w", err)
			}
		}
	}
	keep := map[string]bool{}
	for _, d := range target.m.Dirs {
		keep[d.Path] = true
		if err := mkdirAllIn(m.dir, d.Path, cacheDirPerm); err != nil {
			return fmt.Errorf("materialized copy: %w", err)
		}
	}
	for p := range target.files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			keep[d] = true
		}
	}
	var gone []string
	for _, d := range cur.m.Dirs {
		if !keep[d.Path] {
			gone = append(gone, d.Path)
		}
	}
	// Deepest first, so parents are empty when their turn comes.
	slices.SortFunc(gone, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range gone {
		removeIn(m.dir, d)
	}
	return nil
}

// patchPlan lists the in-place updates that turn old into f, when both are safetensors files
// with the same header (so the same layout) and every changed tensor is linked to its old
// identity by a delta object (either way).
func (s *Store) patchPlan(old, f *manifestFile) ([]inPlace, bool) {
	if old == nil || old.Kind != kindSafetensors || f.Kind != kindSafetensors || old.Header != f.Header ||
		len(old.Tensors) != len(f.Tensors) || old.Size != f.Size {
		return nil, false
	}
	var out []inPlace
	for j := range f.Tensors {
		nt, ot := &f.Tensors[j], &old.Tensors[j]
		if nt.ID == ot.ID {
			continue
		}
		p := inPlace{path: f.Path, off: f.HeaderLen + nt.Begin, size: nt.End - nt.Begin, width: nt.DType.Size()}
		// The record's header says whether it links the two identities (meta would also walk
		// the chain below, reading the base's header and chunk table, and write the metas
		// found into the index: per tensor, the most of a many-tensor catch-up). The header
		// read stays cached for patch's loadDelta.
		if nh, err := s.objects.objectInfoOf(nt.ID); err == nil && nh.hdr.HasDelta() && nh.hdr.Base == ot.ID {
			p.obj, p.dir = nt.ID, delta.Forward
		} else if oh, err := s.objects.objectInfoOf(ot.ID); err == nil && oh.hdr.HasDelta() && oh.hdr.Base == nt.ID {
			p.obj, p.dir = ot.ID, delta.Backward
		} else {
			return nil, false
		}
		out = append(out, p)
	}
	return out, true
}

// adjacentRun returns the end j of the run patches[i:j] that patchRun can apply at once: the
// tensors of one file that lie side by side (a MoE shard holds hundreds of small ones), at
// most ingestChunk bytes together, not across patch stop (where the failpoint of apply sits).
func adjacentRun(patches []inPlace, i, stop int) int {
	j, n := i+1, patches[i].size
	for j < len(patches) && j != stop && patches[j].path == patches[i].path &&
		patches[j].off == patches[j-1].off+patches[j-1].size && n+patches[j].size <= ingestChunk {
		n += patches[j].size
		j++
	}
	return j
}

// patchRun is patch of adjacent tensors (adjacentRun) with one read and one write of the
// copy for them all, instead of one each: what a catch-up costs follows its bytes, not its
// tensors. Each delta is applied to its own tensor's bytes, as patch does.
func (m *materialized) patchRun(ps []inPlace, bufs *patchBufs) error {
	for _, p := range ps {
		if _, err := m.s.objects.loadDelta(p.obj); err != nil {
			return err
		}
	}
	first, last := ps[0], ps[len(ps)-1]
	f, err := m.file(first.path)
	if err != nil {
		return err
	}
	n := int(last.off + last.size - first.off)
	if len(bufs.buf) < n {
		bufs.buf, bufs.orig = make([]byte, n), make([]byte, n)
	}
	b, o := bufs.buf[:n], bufs.orig[:n]
	if err := readFull(f, o, first.off); err != nil {
		return fmt.Errorf("materialized %s: %w", first.path, err)
	}
	copy(b, o)
	for _, p := range ps {
		rel := p.off - first.off
		if err := m.s.objects.applySteps([]planStep{{obj: p.obj, dir: p.dir}}, b[rel:rel+p.size], 0); err != nil {
			return fmt.Errorf("apply to the materialized copy: %w", err)
		}
	}
	if err := writeChangedRuns(f, o, b, first.off); err != nil {
		return fmt.Errorf("materialized %s: %w", first.path, err)
	}
	return nil
}

// patchBufs are the buffers of patch, kept from one tensor to the next: made afresh, they were
// twice the copy's size in garbage at every update.
type patchBufs struct{ buf, orig []byte }

// patch applies one in-place update, 4 MiB at a time, writing back only the byte runs that
// changed. The delta's blocks are decoded through the block cache: the next version's ingest
// codes its deltas against these very sections (their contexts, object_delta_context.go), and finds them
// decoded when the cache holds a version's blocks.
func (m *materialized) patch(p inPlace, bufs *patchBufs) error {
	if _, err := m.s.objects.loadDelta(p.obj); err != nil {
		return err
	}
	f, err := m.file(p.path)
	if err != nil {
		return err
	}
	step := int64(ingestChunk)
	if n := int(min(step, p.size)); len(bufs.buf) < n {
		bufs.buf, bufs.orig = make([]byte, n), make([]byte, n)
	}
	buf, orig := bufs.buf, bufs.orig
	for off := int64(0); off < p.size; off += step {
		n := min(step, p.size-off)
		b, o := buf[:n], orig[:n]
		if err := readFull(f, o, p.off+off); err != nil {
			return fmt.Errorf("materialized %s: %w", p.path, err)
		}
		copy(b, o)
		if err := m.s.objects.applySteps([]planStep{{obj: p.obj, dir: p.dir}}, b, off/int64(p.width)); err != nil {
			return fmt.Errorf("apply to the materialized copy: %w", err)
		}
		if err := writeChangedRuns(f, o, b, p.off+off); err != nil {
			return fmt.Errorf("materialized %s: %w", p.path, err)
		}
	}
	return nil
}
