package store

import (
	"fmt"
	"strings"

	"github.com/weightfs/weightfs/delta"
)

// Version 0 of a slime run (docs/format.md Part III §4, "The seed"). slime numbers its seed
// checkpoint 000000 and its first delta names base_version 000000, but it never writes the
// seed: its sender diffs its first version against --hf-checkpoint, and each engine's
// /pull_weights takes version 0 from its own model path, never from the delta directory. A
// store's versions start at 1 (a manifest's previous 0 means none), so the store does not hold
// the seed either: the first delta is applied to the seed checkpoint as it lies on disk (the
// same --hf-checkpoint directory), and version 1 is sealed as the store's first version, by a
// full ingest of the seed's files with the delta laid over them. deltas/weight_v000001/ then
// serves version 1 whole, which /pull_weights copies; every later version is a delta.

// CommitSlimeDeltaOnSeed seals version v, the store's first, from slime's first delta (index
// and open as for CommitSlimeDelta; its base_version must be 000000) applied to the seed
// checkpoint in dir. The store must hold no version. Every frame and every changed tensor's
// xxh3-128 is checked against the seed before a writer opens; a delta that does not fit is
// refused with an error wrapping ErrBadPatch, and nothing is sealed. dir must not change while
// it is read (its unchanged files are read as Commit reads them, and fail the same way).
func (s *Store) CommitSlimeDeltaOnSeed(dir string, index []byte, open SlimeShardOpener, v uint64) (VersionInfo, error) {
	if err := s.checkOpen(); err != nil {
		return VersionInfo{}, err
	}
	idx, err := delta.ParseSlimeIndexIn(index)
	if err != nil {
		return VersionInfo{}, patchInputError(fmt.Errorf("%s: %w", delta.SlimeIndexName, err))
	}
	switch top, _ := s.versions.highest(); {
	case idx.Version != v:
		return VersionInfo{}, badPatch("%s: its version is %06d, its directory says %d", delta.SlimeIndexName, idx.Version, v)
	case idx.BaseVersion != 0:
		return VersionInfo{}, badPatch("its base_version is %06d, not the seed 000000", idx.BaseVersion)
	case top != 0:
		return VersionInfo{}, badPatch("its base_version is the seed 000000, but the store holds versions already (up to %d)", top)
	}
	files, dirs, _, err := scanTree(dir)
	if err != nil {
		return VersionInfo{}, fmt.Errorf("seed %s: %w", dir, err)
	}
	places := slimePlaces{}
	dataStart := map[string]int64{}
	for _, f := range files {
		if !strings.HasSuffix(f.rel, ".safetensors") {
			continue
		}
		src, err := openBeneath(f.dir, f.rel, 0)
		if err != nil {
			return VersionInfo{}, fmt.Errorf("seed %s: %w", dir, err)
		}
		hdr, err := delta.ReadHeader(src, f.size)
		src.Close()
		if err != nil {
			return VersionInfo{}, fmt.Errorf("seed %s: %s: %w", dir, f.rel, err)
		}
		dataStart[f.rel] = hdr.DataStart()
		for i, t := range hdr.Tensors {
			places.add(t.Name, slimePlace{file: f.rel, i: i, begin: t.Begin, end: t.End, what: fmt.Sprintf("%s%v", t.DType, t.Shape)})
		}
	}
	d, err := decodeSlime(idx, open, places, "the seed "+dir)
	if err != nil {
		return VersionInfo{}, err
	}
	// Every changed tensor's checksum, before anything is stored.
	for _, f := range files {
		cs := d.files[f.rel]
		if len(cs) == 0 {
			continue
		}
		if err := checkSeedSums(f, dataStart[f.rel], cs, d.xor); err != nil {
			return VersionInfo{}, err
		}
	}
	return sealDeltaIn(s, "slime delta", v, 0, func(w *Writer) (VersionInfo, error) {
		info, err := w.addSeeded(files, dirs, dataStart, d)
		if err != nil {
			return VersionInfo{}, fmt.Errorf("on the seed %s: %w", dir, err)
		}
		return info, nil
	})
}

// checkSeedSums reads each changed tensor of the seed file f with the delta laid over it and
// checks its xxh3-128.
func checkSeedSums(f treeEntry, dataStart int64, cs []*slimeTensorChange, xor bool) error {
	src, err := openBeneath(f.dir, f.rel, 0)
	if err != nil {
		return err
	}
	defer src.Close()
	r := &slimeFile{base: src, size: f.size, dataStart: dataStart, changes: cs, xor: xor}
	buf := make([]byte, ingestChunk)
	for _, c := range cs {
		h := delta.NewSlimeHasher()
		for off := dataStart + c.begin; off < dataStart+c.end; {
			b := buf[:min(int64(len(buf)), dataStart+c.end-off)]
			if err := readAtFull(r, b, off); err != nil {
				return fmt.Errorf("seed %s: %w", f.rel, err)
			}
			h.Write(b)
			off += int64(len(b))
		}
		if got := delta.SlimeChecksumOf(h); got != c.checksum {
			return badPatch("shard %s: tensor %s (in %s): xxh3-128 after the delta is %s, the shard says %s (another seed?)",
				c.shard, c.name, f.rel, got, c.checksum)
		}
	}
	return nil
}

// addSeeded adds the seed's files, the changed ones with the delta laid over them, and seals.
func (w *Writer) addSeeded(files, dirs []treeEntry, dataStart map[string]int64, d *slimeIn) (VersionInfo, error) {
	for _, e := range dirs {
		if err := w.AddDir(e.rel, e.mode); err != nil {
			return VersionInfo{}, err
		}
	}
	for _, f := range files {
		cs := d.files[f.rel]
		if len(cs) == 0 {
			if err := w.addPath(f); err != nil {
				return VersionInfo{}, err
			}
			continue
		}
		src, err := openBeneath(f.dir, f.rel, 0)
		if err != nil {
			return VersionInfo{}, err
		}
		err = w.AddFile(f.rel, &slimeFile{base: src, size: f.size, dataStart: dataStart[f.rel], changes: cs, xor: d.xor}, f.size, f.mode)
		src.Close()
		if err != nil {
			return VersionInfo{}, fmt.Errorf("file %s: %w", f.rel, err)
		}
	}
	return w.Seal()
}
