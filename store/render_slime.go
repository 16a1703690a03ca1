package store

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/weightfs/weightfs/delta"
)

// The slime-compatible delta checkpoint of a version (docs/format.md Part III §4, §5): how it is served
// (PlanSlime) and its bytes (RenderSlime, WriteSlimeDelta). Byte layouts are in
// docs/format.md (Part III) §4; the encoder is delta.SlimeWriter.

// SlimeKind says what deltas/weight_vNNNNNN of a version is.
type SlimeKind int

// The kinds of SlimePlan.
const (
	// SlimeFull: the version's top-level files as written (a full pull).
	SlimeFull SlimeKind = iota
	// SlimeDelta: an index and shards overwriting the changed bytes of the version before.
	SlimeDelta
	// SlimeEmpty: a number between two sealed versions, served as the index alone with an
	// empty weight map, so a receiver can step through every number.
	SlimeEmpty
)

func (k SlimeKind) String() string {
	switch k {
	case SlimeFull:
		return "full"
	case SlimeDelta:
		return "delta"
	case SlimeEmpty:
		return "empty"
	}
	return fmt.Sprintf("SlimeKind(%d)", int(k))
}

// SlimePlan says how deltas/weight_vNNNNNN of Version is served.
type SlimePlan struct {
	Version uint64
	Kind    SlimeKind
	// Base is, for SlimeDelta, the sealed version the delta is computed against: the
	// version before, which may lie several numbers back (the numbers between are empty
	// deltas, so the delta is labelled base Version-1 and the chain stays exact).
	Base uint64
	// Reason says, for SlimeFull, why no delta is possible.
	Reason string
}

// slimeChunk is the read size when diffing a tensor; a multiple of every element width.
const slimeChunk = 4 << 20

// slimeRenderFile lists the files of a rendered delta in its cache directory; the view
// serves the files it names and nothing else.
const slimeRenderFile = "render.json"

// PlanSlime decides how version v is served in deltas/: v must be sealed, or lie between two
// sealed versions (then it is SlimeEmpty); otherwise the error wraps ErrNoSuchVersion.
// A sealed version is SlimeFull when it has no predecessor, when its number has more than
// six digits, when its tensor names, dtypes or shapes differ from its predecessor's (or a
// tensor name is in two files, so the weight map cannot name it), when a non-safetensors
// file was added, removed or changed, or when a changed tensor exceeds 4 GiB (u32 byte
// positions); else SlimeDelta.
func (s *Store) PlanSlime(v uint64) (SlimePlan, error) { return s.renders.planSlime(v) }

func (r *renders) planSlime(v uint64) (SlimePlan, error) {
	plan := SlimePlan{Version: v}
	if !r.st.versions.isSealed(v) {
		if v >= 1 && v <= delta.SlimeMaxVersion && r.st.versions.between(v) {
			plan.Kind = SlimeEmpty
			return plan, nil
		}
		return plan, fmt.Errorf("version %d: %w", v, ErrNoSuchVersion)
	}
	cur, err := r.st.versions.sealedVersion(v)
	if err != nil {
		return plan, err
	}
	prev, ok := r.st.Previous(v)
	if !ok {
		plan.Reason = "it has no previous version"
		return plan, nil
	}
	if v > delta.SlimeMaxVersion {
		plan.Reason = "its number has more than six digits (the delta index holds six)"
		return plan, nil
	}
	base, err := r.st.versions.sealedVersion(prev)
	if err != nil {
		return plan, err
	}
	if plan.Reason = slimeFullReason(base, cur); plan.Reason == "" {
		plan.Kind, plan.Base = SlimeDelta, prev
	}
	return plan, nil
}

// slimeFullReason says why cur cannot be served as a delta against base ("" if it can).
func slimeFullReason(base, cur *version) string {
	if why := tensorLayoutChange(base, cur); why != "" {
		return why
	}
	for i := range cur.m.Files {
		f := &cur.m.Files[i]
		bf := base.files[f.Path]
		if f.Kind != kindSafetensors && (bf == nil || bf.SHA256 != f.SHA256) {
			return fmt.Sprintf("non-safetensors file %s changed (a receiver copies those on full pulls only)", f.Path)
		}
	}
	for i := range base.m.Files {
		if bf := &base.m.Files[i]; bf.Kind != kindSafetensors && cur.files[bf.Path] == nil {
			return fmt.Sprintf("non-safetensors file %s was removed", bf.Path)
		}
	}
	if name, a, b := cur.duplicateName(); name != "" {
		return fmt.Sprintf("tensor name %s is in both %s and %s", name, a, b)
	}
	for _, c := range slimeChanges(base, cur) {
		if n := c.cur.End - c.cur.Begin; n > delta.SlimeMaxTensorBytes {
			return fmt.Sprintf("changed tensor %s has %d bytes, beyond the 4 GiB u32 byte positions reach", c.cur.Name, n)
		}
	}
	return ""
}

// slimeChange is one tensor that differs between base and cur (same file, name, dtype and
// shape; checked by tensorLayoutChange).
type slimeChange struct {
	baseFile, curFile *manifestFile
	base, cur         *manifestTensor
}

// slimeChanges lists the changed tensors in cur's file and tensor order.
func slimeChanges(base, cur *version) []slimeChange {
	var out []slimeChange
	for i := range cur.m.Files {
		f := &cur.m.Files[i]
		if f.Kind != kindSafetensors {
			continue
		}
		bf := base.files[f.Path]
		byName := make(map[string]*manifestTensor, len(bf.Tensors))
		for j := range bf.Tensors {
			byName[bf.Tensors[j].Name] = &bf.Tensors[j]
		}
		for j := range f.Tensors {
			t := &f.Tensors[j]
			if bt := byName[t.Name]; bt.ID != t.ID {
				out = append(out, slimeChange{baseFile: bf, curFile: f, base: bt, cur: t})
			}
		}
	}
	return out
}

// RenderSlime returns how version v is served in deltas/ and, unless it is SlimeFull (the
// caller serves the version's own top-level files), its files: for SlimeEmpty the index in
// memory, for SlimeDelta the index and shards rendered in the cache directory on the first
// call. A store that fails to read gives its error (wrapping ErrCorrupt) and no files.
func (s *Store) RenderSlime(v uint64) (SlimePlan, []RenderedFile, error) {
	return s.renders.renderSlime(v)
}

func (r *renders) renderSlime(v uint64) (SlimePlan, []RenderedFile, error) {
	plan, err := r.planSlime(v)
	if err != nil {
		return plan, nil, err
	}
	switch plan.Kind {
	case SlimeFull:
		return plan, nil, nil
	case SlimeEmpty:
		index, err := delta.EncodeSlimeIndex(v, nil)
		if err != nil {
			return plan, nil, err
		}
		return plan, []RenderedFile{{Name: delta.SlimeIndexName, Data: index, Size: int64(len(index))}}, nil
	}
	cur, err := r.st.versions.sealedVersion(v)
	if err != nil {
		return plan, nil, err
	}
	base, err := r.st.versions.sealedVersion(plan.Base)
	if err != nil {
		return plan, nil, err
	}
	name := renderName(v, renderKey("slime", cur, base))
	final := r.renderDir("deltas", name)
	if files, err := r.loadRenderedDir(final); err == nil {
		r.stats.renderHits.Add(1)
		r.pruneRenders("deltas", v, name)
		return plan, files, nil
	} else if !errors.Is(err, fs.ErrNotExist) || fileExists(final) {
		// Any part missing or wrong: the whole render goes, so the new one's name is free.
		r.log.Warn("cached delta is unusable, dropped, rendering it again", "render", final, "err", err)
		r.dropRender(final, "")
	}
	r.stats.renderMisses.Add(1)
	tmp, err := r.renderTemp()
	if err != nil {
		return plan, nil, err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "delta")
	if err := os.Mkdir(dir, cacheDirPerm); err != nil {
		return plan, nil, fmt.Errorf("create render directory: %w", err)
	}
	if _, err := r.writeSlimeDelta(cur, base, dir); err != nil {
		return plan, nil, err
	}
	if err := r.st.cacheMkdirAll(filepath.Dir(final)); err != nil {
		return plan, nil, fmt.Errorf("create render directory: %w", err)
	}
	if err := os.Rename(dir, final); err != nil {
		// Another render of the same key got there first: its bytes are the same, unless
		// it is damaged already; then it goes and this one takes its place.
		if files, lerr := r.loadRenderedDir(final); lerr == nil {
			return plan, files, nil
		}
		r.dropRender(final, "")
		if err := os.Rename(dir, final); err != nil {
			return plan, nil, fmt.Errorf("install delta of version %d: %w", v, err)
		}
	}
	r.pruneRenders("deltas", v, name)
	files, err := r.loadRenderedDir(final)
	return plan, files, err
}

// WriteSlimeDelta writes the slime delta of version v (its plan must be SlimeDelta) into
// dir, which must exist and be empty: the index, the shards, and nothing else. It returns
// the file names, index first. The mount serves the same bytes (RenderSlime).
func (s *Store) WriteSlimeDelta(v uint64, dir string) ([]string, error) {
	return s.renders.exportSlimeDelta(v, dir)
}

func (r *renders) exportSlimeDelta(v uint64, dir string) ([]string, error) {
	plan, err := r.planSlime(v)
	if err != nil {
		return nil, err
	}
	if plan.Kind != SlimeDelta {
		return nil, fmt.Errorf("delta of version %d: it is served as %s checkpoint (%s)", v, plan.Kind, plan.Reason)
	}
	cur, err := r.st.versions.sealedVersion(v)
	if err != nil {
		return nil, err
	}
	base, err := r.st.versions.sealedVersion(plan.Base)
	if err != nil {
		return nil, err
	}
	files, err := r.writeSlimeDelta(cur, base, dir)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(filepath.Join(dir, slimeRenderFile)); err != nil {
		return nil, err
	}
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Name
	}
	return names, nil
}

// renderedEntry is one line of render.json.
type renderedEntry struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	// CRC32C are the sums of the file's bytes as rendered, one per 64 KiB (render_sums.go).
	CRC32C []uint32 `json:"crc32c"`
}

// loadRenderedDir reads the file list of a rendered delta and checks every file's size and
// that its sums fit it; the bytes are checked as they are read (RenderedFile.ReadAt).
func (r *renders) loadRenderedDir(dir string) ([]RenderedFile, error) {
	data, err := readCacheFile(filepath.Join(dir, slimeRenderFile))
	if err != nil {
		return nil, err
	}
	var list []renderedEntry
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", slimeRenderFile, err)
	}
	files := make([]RenderedFile, 0, len(list))
	for _, e := range list {
		if e.Name == "" || e.Name != filepath.Base(e.Name) || e.Name == slimeRenderFile {
			return nil, fmt.Errorf("%s lists %q", slimeRenderFile, e.Name)
		}
		p := filepath.Join(dir, e.Name)
		st, err := os.Stat(p)
		if err == nil && !st.Mode().IsRegular() {
			err = fmt.Errorf("%w (mode %v)", errNotRegular, st.Mode())
		}
		if err != nil {
			return nil, fmt.Errorf("rendered %s: %w", e.Name, err)
		}
		if st.Size() != e.Size {
			return nil, fmt.Errorf("rendered %s has %d bytes, the list says %d", e.Name, st.Size(), e.Size)
		}
		check, err := r.newRenderCheck(e.Name, e.Size, e.CRC32C, dir, "")
		if err != nil {
			return nil, err
		}
		files = append(files, RenderedFile{Name: e.Name, Path: p, Size: e.Size, check: check})
	}
	return files, nil
}

// writeSlimeDelta diffs every changed tensor of cur against base, tensor by tensor in
// chunks, and writes the index, the shards and render.json (all synced) into dir.
func (r *renders) writeSlimeDelta(cur, base *version, dir string) ([]RenderedFile, error) {
	v := cur.m.Version
	var sinks []*os.File
	defer func() {
		for _, f := range sinks {
			f.Close()
		}
	}()
	w, err := delta.NewSlimeWriter(v, delta.SlimeShardLimit, func(i int) (io.Writer, error) {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf(".frames-%d", i)))
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, f)
		return f, nil
	})
	if err != nil {
		return nil, err
	}
	bufBase, bufCur := make([]byte, slimeChunk), make([]byte, slimeChunk)
	for _, c := range slimeChanges(base, cur) {
		positions, newBytes, checksum, err := r.slimeTensorDiff(base, cur, c, bufBase, bufCur)
		if err != nil {
			return nil, fmt.Errorf("delta of version %d: %w", v, err)
		}
		if err := w.Add(c.cur.Name, c.cur.End-c.cur.Begin, positions, newBytes, checksum); err != nil {
			return nil, fmt.Errorf("delta of version %d: %w", v, err)
		}
	}
	d, err := w.Finish()
	if err != nil {
		return nil, fmt.Errorf("delta of version %d: %w", v, err)
	}
	return writeSlimeFiles(d, dir, sinks)
}

// writeSlimeFiles turns the frames the writer sent to sinks into shard files (header, then
// frames), and writes the index and render.json.
func writeSlimeFiles(d *delta.SlimeDelta, dir string, sinks []*os.File) ([]RenderedFile, error) {
	var indexSums sumWriter
	indexSums.Write(d.Index)
	files := []RenderedFile{{Name: delta.SlimeIndexName, Size: int64(len(d.Index))}}
	sums := []*fileSums{indexSums.sums()}
	if err := syncedCreate(filepath.Join(dir, delta.SlimeIndexName), d.Index); err != nil {
		return nil, fmt.Errorf("write delta index: %w", err)
	}
	for i, sh := range d.Shards {
		shardSums, err := writeShard(filepath.Join(dir, sh.Name), sh, sinks[i])
		if err != nil {
			return nil, fmt.Errorf("write delta shard %s: %w", sh.Name, err)
		}
		files = append(files, RenderedFile{Name: sh.Name, Size: shardSums.size})
		sums = append(sums, shardSums)
		os.Remove(sinks[i].Name())
	}
	list := make([]renderedEntry, len(files))
	for i, f := range files {
		list[i] = renderedEntry{Name: f.Name, Size: f.Size, CRC32C: sums[i].crcs}
		files[i].Path = filepath.Join(dir, f.Name)
	}
	data, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	if err := syncedCreate(filepath.Join(dir, slimeRenderFile), data); err != nil {
		return nil, fmt.Errorf("write %s: %w", slimeRenderFile, err)
	}
	return files, nil
}

// writeShard writes a shard file: its header, then the frames collected in frames. It returns
// the sums of the bytes it wrote (their size is the file's).
func writeShard(p string, sh delta.SlimeShard, frames *os.File) (*fileSums, error) {
	if _, err := frames.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, cacheFilePerm)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	var sums sumWriter
	w := io.MultiWriter(out, &sums)
	if _, err := w.Write(sh.Header); err != nil {
		return nil, err
	}
	n, err := io.Copy(w, frames)
	if err != nil {
		return nil, err
	}
	if n != sh.DataSize {
		return nil, fmt.Errorf("%d frame bytes, the writer counted %d", n, sh.DataSize)
	}
	if err := out.Sync(); err != nil {
		return nil, err
	}
	return sums.sums(), out.Close()
}

// slimeTensorDiff reads one changed tensor of base and cur in chunks and returns the byte
// positions that differ, the new bytes there, and the xxh3-128 of the new tensor. Both
// tensors are hashed on the way and checked against their identities (the SHA-256 of their
// bytes), so a bad read is an error (ErrCorrupt), never a wrong delta.
func (r *renders) slimeTensorDiff(base, cur *version, c slimeChange, bufBase, bufCur []byte) (positions []uint32, newBytes []byte, checksum string, err error) {
	size := c.cur.End - c.cur.Begin
	// Checked per tensor (read_check.go); the SHA-256 below hashes the bytes the diff was made of.
	rb := r.st.newVersionFile(base, c.baseFile, readOpts{check: true})
	rc := r.st.newVersionFile(cur, c.curFile, readOpts{check: true})
	offBase, offCur := c.baseFile.HeaderLen+c.base.Begin, c.curFile.HeaderLen+c.cur.Begin
	hb, hc, xh := sha256.New(), sha256.New(), delta.NewSlimeHasher()
	for off := int64(0); off < size; off += slimeChunk {
		n := min(slimeChunk, size-off)
		b, cb := bufBase[:n], bufCur[:n]
		if err := readAtFull(rb, b, offBase+off); err != nil {
			return nil, nil, "", fmt.Errorf("read tensor %s of version %d: %w", c.base.Name, base.m.Version, err)
		}
		if err := readAtFull(rc, cb, offCur+off); err != nil {
			return nil, nil, "", fmt.Errorf("read tensor %s of version %d: %w", c.cur.Name, cur.m.Version, err)
		}
		hb.Write(b)
		hc.Write(cb)
		xh.Write(cb)
		pos, nb, err := delta.SlimeDiff(b, cb)
		if err != nil {
			return nil, nil, "", fmt.Errorf("tensor %s: %w", c.cur.Name, err)
		}
		for _, p := range pos {
			positions = append(positions, uint32(off)+p)
		}
		newBytes = append(newBytes, nb...)
	}
	if err := checkSum(hb, c.base.ID, c.base.Name, base.m.Version); err != nil {
		r.st.mat.suspect(err)
		return nil, nil, "", err
	}
	if err := checkSum(hc, c.cur.ID, c.cur.Name, cur.m.Version); err != nil {
		r.st.mat.suspect(err)
		return nil, nil, "", err
	}
	return positions, newBytes, delta.SlimeChecksumOf(xh), nil
}

func checkSum(h hash.Hash, want ID, tensor string, v uint64) error {
	var got ID
	copy(got[:], h.Sum(nil))
	if got != want {
		return fmt.Errorf("tensor %s of version %d read as bytes with SHA-256 %s, its identity is %s: %w", tensor, v, got, want, ErrCorrupt)
	}
	return nil
}

// writeSlimeDeltaReference is the plain form of writeSlimeDelta that the tests compare it
// with: each changed tensor read whole and diffed by delta.SlimeWriter.AddDiff.
func (r *renders) writeSlimeDeltaReference(cur, base *version, dir string) ([]RenderedFile, error) {
	var sinks []*os.File
	defer func() {
		for _, f := range sinks {
			f.Close()
		}
	}()
	w, err := delta.NewSlimeWriter(cur.m.Version, delta.SlimeShardLimit, func(i int) (io.Writer, error) {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf(".frames-%d", i)))
		if err == nil {
			sinks = append(sinks, f)
		}
		return f, err
	})
	if err != nil {
		return nil, err
	}
	for _, c := range slimeChanges(base, cur) {
		size := c.cur.End - c.cur.Begin
		b, cb := make([]byte, size), make([]byte, size)
		if err := readAtFull(r.st.newVersionFile(base, c.baseFile, readOpts{}), b, c.baseFile.HeaderLen+c.base.Begin); err != nil {
			return nil, err
		}
		if err := readAtFull(r.st.newVersionFile(cur, c.curFile, readOpts{}), cb, c.curFile.HeaderLen+c.cur.Begin); err != nil {
			return nil, err
		}
		if _, err := w.AddDiff(c.cur.Name, b, cb); err != nil {
			return nil, err
		}
	}
	d, err := w.Finish()
	if err != nil {
		return nil, err
	}
	return writeSlimeFiles(d, dir, sinks)
}
