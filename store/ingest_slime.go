package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/delta"
)

// A slime delta checkpoint in (docs/format.md Part III §4, "Writing a delta in"): a version
// that comes as slime's delta checkpoint from the latest version, as slime's disk sender
// writes it into MNT/deltas/weight_vNNNNNN/. It is the inverse of RenderSlime, and it seals
// through the same path as CommitPatch: every frame is decoded and checked against the latest
// version before a writer opens; then each changed file is read as the base's bytes with the
// changed bytes laid over them (slimeFile), each changed tensor stored by the ingest's own
// ingestTensor, each unchanged tensor or file by reference to its object. The per-tensor
// xxh3-128 of the new bytes is checked in the pass that hashes the file, before the seal. So
// the manifest and objects are those a full ingest of the same bytes stores, and nothing is
// sealed on an error.

// SlimeShardOpener opens a shard of an incoming delta by its file name.
type SlimeShardOpener func(name string) (io.ReaderAt, int64, error)

// CommitSlimeDelta seals version v made from the latest sealed version and the slime delta
// checkpoint whose model.safetensors.index.json is index and whose shards open gives. A delta
// that cannot make that version is refused with an error wrapping ErrBadPatch that names the
// shard and the tensor: its version is not v or its base_version not the latest version, its
// index or a shard is malformed or truncated, a tensor is one the latest version lacks (or a
// name in two of its files), a frame's size or positions do not fit the tensor (another dtype
// or shape), or a tensor's xxh3-128 after the delta is not the shard's. Nothing is sealed on
// an error.
func (s *Store) CommitSlimeDelta(index []byte, open SlimeShardOpener, v uint64) (VersionInfo, error) {
	if err := s.checkOpen(); err != nil {
		return VersionInfo{}, err
	}
	d, base, err := s.ingest.checkSlime(index, open, v)
	if err != nil {
		return VersionInfo{}, err
	}
	return sealDeltaIn(s, "slime delta", v, base.m.Version, func(w *Writer) (VersionInfo, error) {
		return w.applySlime(d, base)
	})
}

// slimeTensorChange is one changed tensor of an incoming delta: its byte positions (from the
// tensor's first byte, ascending) and the bytes to write (or XOR) there.
type slimeTensorChange struct {
	name      string
	index     int // in the base file's tensors
	begin     int64
	end       int64 // data offsets, as in the header
	positions []uint32
	values    []byte
	checksum  string
	shard     string
}

// slimeIn is a checked incoming delta: the changes of each file.
type slimeIn struct {
	xor   bool
	files map[string][]*slimeTensorChange // by file path, in tensor order
}

// checkSlime (the ingest part's) reads the whole delta and checks it against the latest
// version before a writer opens.
func (in *ingester) checkSlime(index []byte, open SlimeShardOpener, v uint64) (*slimeIn, *version, error) {
	s := in.st
	idx, err := delta.ParseSlimeIndexIn(index)
	if err != nil {
		return nil, nil, patchInputError(fmt.Errorf("%s: %w", delta.SlimeIndexName, err))
	}
	if idx.Version != v {
		return nil, nil, badPatch("%s: its version is %06d, its directory says %d", delta.SlimeIndexName, idx.Version, v)
	}
	latest, ok := s.Latest()
	if !ok {
		return nil, nil, badPatch("the store has no version to apply it to (write the first version whole, or give slime's seed checkpoint: CommitSlimeDeltaOnSeed)")
	}
	if idx.BaseVersion != latest {
		return nil, nil, badPatch("its base_version is %06d, the latest version is %d", idx.BaseVersion, latest)
	}
	base, err := s.versions.sealedVersion(latest)
	if err != nil {
		return nil, nil, err
	}
	places := slimePlaces{}
	for i := range base.m.Files {
		if f := &base.m.Files[i]; f.Kind == kindSafetensors {
			for j, t := range f.Tensors {
				places.add(t.Name, slimePlace{file: f.Path, i: j, begin: t.Begin, end: t.End, what: fmt.Sprintf("%s%v", t.DType, t.Shape)})
			}
		}
	}
	d, err := decodeSlime(idx, open, places, fmt.Sprintf("version %d", latest))
	if err != nil {
		return nil, nil, err
	}
	return d, base, nil
}

// slimePlace is where a tensor of the base lives.
type slimePlace struct {
	file       string
	i          int   // in the file's tensors
	begin, end int64 // data offsets
	what       string
	dup        bool // the name is in two files: the weight map cannot name it
}

// slimePlaces finds the base's tensors by name (a delta's weight map names tensors, not files).
type slimePlaces map[string]slimePlace

func (p slimePlaces) add(name string, pl slimePlace) {
	if _, seen := p[name]; seen {
		pl.dup = true
	}
	p[name] = pl
}

// decodeSlime reads and checks every shard of the delta idx against the base's tensors
// (baseName names the base in errors).
func decodeSlime(idx *delta.SlimeIndex, open SlimeShardOpener, places slimePlaces, baseName string) (*slimeIn, error) {
	d := &slimeIn{xor: idx.Encoding == delta.SlimeXOR, files: map[string][]*slimeTensorChange{}}
	seen := map[string]bool{}
	for _, shard := range idx.Shards {
		r, size, err := open(shard)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, badPatch("shard %s: the index names it, the directory has no such file", shard)
			}
			return nil, fmt.Errorf("open shard %s: %w", shard, err)
		}
		sr, err := delta.OpenSlimeShard(r, size)
		if err != nil {
			return nil, patchInputError(fmt.Errorf("shard %s (%d bytes): %w", shard, size, err))
		}
		for _, t := range sr.Header.Tensors {
			if idx.WeightMap[t.Name] != shard {
				return nil, badPatch("shard %s holds tensor %s, which the index maps to %q", shard, t.Name, idx.WeightMap[t.Name])
			}
			pl, ok := places[t.Name]
			switch {
			case !ok:
				return nil, badPatch("shard %s: tensor %s: %s has no such tensor", shard, t.Name, baseName)
			case pl.dup:
				return nil, badPatch("shard %s: tensor %s: %s has it in two files", shard, t.Name, baseName)
			}
			frame, err := sr.Frame(t.Name)
			if err != nil {
				return nil, patchInputError(fmt.Errorf("shard %s: %w: %w", shard, delta.ErrMalformed, err))
			}
			pos, vals, err := delta.DecodeSlimeChanges(frame, pl.end-pl.begin, idx.Encoding)
			if err != nil {
				return nil, patchInputError(fmt.Errorf("shard %s: tensor %s (%s in %s): %w", shard, t.Name, pl.what, pl.file, err))
			}
			seen[t.Name] = true
			d.files[pl.file] = append(d.files[pl.file], &slimeTensorChange{name: t.Name, index: pl.i, begin: pl.begin, end: pl.end,
				positions: pos, values: vals, checksum: sr.Header.Metadata[t.Name], shard: shard})
		}
	}
	for _, name := range sortedKeys(idx.WeightMap) {
		if !seen[name] {
			return nil, badPatch("the index maps tensor %s to %s, which does not hold it", name, idx.WeightMap[name])
		}
	}
	for _, cs := range d.files {
		sort.Slice(cs, func(i, j int) bool { return cs[i].index < cs[j].index })
	}
	return d, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// applySlime adds every file of the new version to w and seals it, as applyPatch does.
func (w *Writer) applySlime(d *slimeIn, base *version) (VersionInfo, error) {
	if err := w.startFrom(base, false); err != nil {
		return VersionInfo{}, err
	}
	changed := map[string]bool{}
	for i := range base.m.Files {
		bf := &base.m.Files[i]
		cs := d.files[bf.Path]
		if len(cs) == 0 {
			continue
		}
		changed[bf.Path] = true
		err := w.addSlimeFile(bf, base.m.Version, cs, d.xor)
		if err != nil && w.s.mat.isBroken() {
			if err := w.s.mat.ensure(); err != nil {
				return VersionInfo{}, err
			}
			err = w.addSlimeFile(bf, base.m.Version, cs, d.xor)
		}
		if err != nil {
			return VersionInfo{}, fmt.Errorf("file %s: %w", bf.Path, err)
		}
	}
	if err := w.addUnchangedFiles(base, changed); err != nil {
		return VersionInfo{}, err
	}
	return w.Seal()
}

// addSlimeFile ingests a safetensors file of the base (version baseV) with the changes cs,
// by the patch's reference path (storeOverlaid), checking each changed tensor's xxh3-128 in
// the pass that hashes the file.
func (w *Writer) addSlimeFile(bf *manifestFile, baseV uint64, cs []*slimeTensorChange, xor bool) error {
	src, err := w.s.OpenFile(baseV, bf.Path)
	if err != nil {
		return err
	}
	defer src.Close()
	prefix := make([]byte, bf.HeaderLen)
	if err := readAtFull(src, prefix, 0); err != nil {
		return fmt.Errorf("read the base's header: %w", err)
	}
	hdr, err := delta.ParseHeader(prefix, bf.Size)
	if err != nil {
		return fmt.Errorf("the base's header: %w: %w", ErrCorrupt, err)
	}
	r := &slimeFile{base: src, size: bf.Size, dataStart: hdr.DataStart(), changes: cs, xor: xor}
	entry := &manifestFile{Path: bf.Path, Mode: bf.Mode, Size: bf.Size, Kind: kindSafetensors, HeaderLen: bf.HeaderLen, Header: bf.Header}
	w.hold(entry.Header)
	changed := make(map[int]bool, len(cs))
	for _, c := range cs {
		changed[c.index] = true
	}
	tee := newSlimeSums(hdr.DataStart(), cs)
	err = w.storeOverlaid(entry, bf, overlaid{hdr: hdr, tee: tee,
		open:    func() io.ReaderAt { return r }, // safe for concurrent use
		changes: func(i int, _ delta.Tensor) bool { return changed[i] },
	})
	if err != nil {
		return err
	}
	for i, c := range cs {
		if got := delta.SlimeChecksumOf(tee.hashers[i]); got != c.checksum {
			return badPatch("shard %s: tensor %s: xxh3-128 after the delta is %s, the shard says %s (another base, or damage on the way)",
				c.shard, hdr.Tensors[c.index].Name, got, c.checksum)
		}
	}
	w.s.mat.contentChecks().noteSums(keyOf(entry), tee.copySums.sums())
	return w.addEntry(entry)
}

// slimeFile reads a file of the new version: the base's bytes (through the store's checked
// read path) with the delta's changes laid over them. Safe for concurrent use.
type slimeFile struct {
	base      io.ReaderAt
	size      int64
	dataStart int64
	changes   []*slimeTensorChange // ascending tensor order, so ascending data offsets
	xor       bool
}

func (f *slimeFile) ReadAt(b []byte, off int64) (int, error) {
	b, atEnd, err := readBaseUnder(f.base, f.size, b, off)
	if err != nil || len(b) == 0 {
		return 0, err
	}
	end := off + int64(len(b))
	for _, c := range f.changes {
		tb, te := f.dataStart+c.begin, f.dataStart+c.end
		if te <= off || tb >= end {
			continue
		}
		// Positions of c inside [off, end), relative to the tensor.
		lo, hi := max(off-tb, 0), min(end, te)-tb
		i := sort.Search(len(c.positions), func(k int) bool { return int64(c.positions[k]) >= lo })
		for ; i < len(c.positions) && int64(c.positions[i]) < hi; i++ {
			at := tb + int64(c.positions[i]) - off
			if f.xor {
				b[at] ^= c.values[i]
			} else {
				b[at] = c.values[i]
			}
		}
	}
	return len(b), atEnd
}

// slimeSums takes the file's bytes in order (hashPieces' tee): the sums of the copy, and the
// xxh3-128 of each changed tensor's bytes.
type slimeSums struct {
	copySums  sumWriter
	dataStart int64
	changes   []*slimeTensorChange
	hashers   []*xxh3.Hasher128
	off       int64
}

func newSlimeSums(dataStart int64, cs []*slimeTensorChange) *slimeSums {
	t := &slimeSums{dataStart: dataStart, changes: cs, hashers: make([]*xxh3.Hasher128, len(cs))}
	for i := range t.hashers {
		t.hashers[i] = delta.NewSlimeHasher()
	}
	return t
}

func (t *slimeSums) Write(p []byte) (int, error) {
	t.copySums.Write(p)
	end := t.off + int64(len(p))
	for i, c := range t.changes {
		tb, te := t.dataStart+c.begin, t.dataStart+c.end
		if te <= t.off || tb >= end {
			continue
		}
		t.hashers[i].Write(p[max(tb, t.off)-t.off : min(te, end)-t.off])
	}
	t.off = end
	return len(p), nil
}
