package store

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/store/pack"
)

// moeVersions returns n versions of a checkpoint of many small tensors (experts of 2 KiB
// each, bf16) and a config file; each version moves a few elements of every tensor.
func moeVersions(t testing.TB, n, tensors int) []map[string][]byte {
	rng := mrand.New(mrand.NewPCG(7, 29))
	data := make([][]byte, tensors)
	for i := range data {
		data[i] = bf16Like(rng, 1024)
	}
	var out []map[string][]byte
	for v := 0; v < n; v++ {
		var ts []testTensor
		for i := range data {
			if v > 0 {
				data[i] = perturb(rng, data[i], 2, 0.02)
			}
			ts = append(ts, testTensor{fmt.Sprintf("model.layers.%d.mlp.experts.%d.up_proj.weight", i/16, i%16), delta.DTypeBF16, []int64{32, 32}, data[i]})
		}
		out = append(out, map[string][]byte{
			"model.safetensors": safetensorsFile(t, ts...),
			"config.json":       []byte(fmt.Sprintf(`{"step":%d}`, v)),
		})
	}
	return out
}

// storeFiles lists the regular files below dir (relative paths); none if it does not exist.
func filesBelow(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPacksRoundTrip: a version of 150 small tensors goes into one pack and one index (the
// only files the seal adds beside the manifest: no object file), and reads back byte for
// byte, in the writer, after a reopen, and in a reader; the manifest names the index.
func TestPacksRoundTrip(t *testing.T) {
	s, root := newStore(t, Options{})
	versions := moeVersions(t, 3, 150)
	want := map[uint64]map[string]string{}
	for i, files := range versions {
		v := uint64(i + 1)
		_, dir := commitTree(t, s, v, files)
		want[v] = treeHashes(t, dir)
		packs := filesBelow(t, filepath.Join(root, packDir))
		indexes := filesBelow(t, filepath.Join(root, indexDir))
		if len(packs) != i+1 || len(indexes) != i+1 {
			t.Fatalf("after version %d: %d packs and %d indexes, want %d of each: %v %v", v, len(packs), len(indexes), i+1, packs, indexes)
		}
		if objs := filesBelow(t, filepath.Join(root, "objects")); len(objs) != 0 {
			t.Fatalf("after version %d: loose object files %v", v, objs)
		}
		ver, err := s.versions.loadVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		if len(ver.m.Indexes) != 1 || ver.m.Indexes[0] != indexes[len(indexes)-1] {
			t.Fatalf("version %d names indexes %v; the store has %v", v, ver.m.Indexes, indexes)
		}
		data, err := s.be.GetManifest(v)
		if err != nil {
			t.Fatal(err)
		}
		// Format 4 (its tensors' xxh3-128), which holds indexes too.
		if got := data[4]; got != manifestTensorDigests {
			t.Fatalf("manifest of version %d has format %d, want %d", v, got, manifestTensorDigests)
		}
	}
	// The first pack holds every object of version 1: 150 tensors, the header, the config.
	x, err := loadIndex(s.be.records, filesBelow(t, filepath.Join(root, indexDir))[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Packs) != 1 || len(x.Packs[0].Entries) < 152 {
		t.Fatalf("index of version 1: %d packs, %d entries", len(x.Packs), len(x.Packs[0].Entries))
	}
	for v, w := range want {
		sameTree(t, fmt.Sprintf("export of v%d", v), exportHashes(t, s, v), w)
	}
	if err := closeStore(t, s); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, root, Options{})
	r := openStore(t, root, Options{ReadOnly: true})
	for v, w := range want {
		sameTree(t, fmt.Sprintf("export of v%d after reopen", v), exportHashes(t, s, v), w)
		sameTree(t, fmt.Sprintf("reader export of v%d", v), exportHashes(t, r, v), w)
	}
}

// TestPacksLargeObjectIsItsOwnPack: an object file of at least packSmallObject bytes becomes
// a pack of its own: its temporary file is the pack (same inode), the table appended.
func TestPacksLargeObjectIsItsOwnPack(t *testing.T) {
	s, root := newStore(t, Options{})
	content := make([]byte, packSmallObject+(1<<20))
	rand.Read(content)
	fw, err := newFullWriter(s.be, s.codec, 1, int64(len(content)))
	if err != nil {
		t.Fatal(err)
	}
	defer fw.abort()
	if fw.f == nil {
		t.Fatal("a large object is built in memory")
	}
	if _, err := fw.Write(content); err != nil {
		t.Fatal(err)
	}
	id, err := fw.finish(ID{}, ID{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	size := fw.size()
	before, err := fw.f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.put(id); err != nil {
		t.Fatal(err)
	}
	if err := s.be.SyncObjects(); err != nil {
		t.Fatal(err)
	}
	loc, ok := s.be.packs.locate(id)
	if !ok || loc.Offset != 0 || loc.Length != size {
		t.Fatalf("large object at %+v (found %v), want offset 0 length %d", loc, ok, size)
	}
	after, err := os.Stat(filepath.Join(root, packDir, loc.Pack.String()[:2], loc.Pack.String()))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Fatal("the pack is a copy of the object's temporary file")
	}
	if after.Size() != size+pack.EntryLen+pack.FooterLen {
		t.Fatalf("pack of %d bytes for an object of %d", after.Size(), size)
	}
	f, err := s.be.OpenObject(id)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := checkCRC(f); err != nil {
		t.Fatal(err)
	}
}

// TestPacksReaderRefreshLoadsNamedIndexes: a reader open before a version is sealed reads
// it after Refresh, having read the index its manifest names (no listing of every index).
func TestPacksReaderRefreshLoadsNamedIndexes(t *testing.T) {
	s, root := newStore(t, Options{})
	versions := moeVersions(t, 2, 40)
	commitTree(t, s, 1, versions[0])
	r := openStore(t, root, Options{ReadOnly: true})
	_, dir := commitTree(t, s, 2, versions[1])
	reloads := r.be.packs.reloads
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	sameTree(t, "reader export of v2", exportHashes(t, r, 2), treeHashes(t, dir))
	if got := r.be.packs.reloads; got != reloads {
		t.Fatalf("the reader read every index %d times; the manifest named the one it needed", got-reloads)
	}
}

// TestPacksFormat2StoreTakesPacks: a store of format 2 with loose objects, opened by a writer
// of this program, becomes format 3; the new version goes into packs, and both read.
func TestPacksFormat2StoreTakesPacks(t *testing.T) {
	s, root := newLooseStore(t, Options{})
	versions := moeVersions(t, 2, 30)
	_, dir1 := commitTree(t, s, 1, versions[0])
	loose := filesBelow(t, filepath.Join(root, "objects"))
	if len(loose) == 0 || len(filesBelow(t, filepath.Join(root, packDir))) != 0 {
		t.Fatalf("the loose store wrote %d object files and packs %v", len(loose), filesBelow(t, filepath.Join(root, packDir)))
	}
	if b, _ := os.ReadFile(filepath.Join(root, formatFileName)); !bytes.Equal(b, encodeFormatVersion(2)) {
		t.Fatalf("loose store's format file % x", b)
	}
	if err := closeStore(t, s); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, root, Options{})
	if b, _ := os.ReadFile(filepath.Join(root, formatFileName)); !bytes.Equal(b, encodeFormatVersion(3)) {
		t.Fatalf("format file % x after a writer's open, want format 3", b)
	}
	_, dir2 := commitTree(t, s, 2, versions[1])
	if got := filesBelow(t, filepath.Join(root, "objects")); len(got) != len(loose) {
		t.Fatalf("%d object files after version 2, %d before", len(got), len(loose))
	}
	if len(filesBelow(t, filepath.Join(root, packDir))) != 1 {
		t.Fatalf("packs after version 2: %v", filesBelow(t, filepath.Join(root, packDir)))
	}
	r := openStore(t, root, Options{ReadOnly: true})
	for _, st := range []*Store{s, r} {
		sameTree(t, "v1", exportHashes(t, st, 1), treeHashes(t, dir1))
		sameTree(t, "v2", exportHashes(t, st, 2), treeHashes(t, dir2))
	}
	n := 0
	if err := s.be.ListObjects(func(ID, int64) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if packed := len(s.be.packs.loc); n < len(loose)+1 || packed == 0 {
		t.Fatalf("ListObjects lists %d objects (%d loose, %d packed)", n, len(loose), packed)
	}
}

// packOfFile returns a packed object of version v's file p (its first tensor) and its pack's
// path.
func packedTensor(t *testing.T, s *Store, root string, v uint64, p string) (ID, packLocation, string) {
	t.Helper()
	ver, err := s.versions.loadVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ver.m.Files {
		if f.Path == p {
			id := f.Tensors[0].ID
			loc, ok := s.be.packs.locate(id)
			if !ok {
				t.Fatalf("object %s is not packed", id)
			}
			h := loc.Pack.String()
			return id, loc, filepath.Join(root, packDir, h[:2], h)
		}
	}
	t.Fatalf("no file %s", p)
	return ID{}, packLocation{}, ""
}

// TestPacksDamagedRecord: a flipped byte in a record reads as ErrCorrupt naming the object
// and its pack.
func TestPacksDamagedRecord(t *testing.T) {
	s, root := newStore(t, Options{})
	commitTree(t, s, 1, moeVersions(t, 1, 20)[0])
	id, loc, path := packedTensor(t, s, root, 1, "model.safetensors")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[loc.Offset+loc.Length-10] ^= 0x40
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o400); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true})
	expectDamage(r)
	expectDamage(s)
	f, err := r.OpenFile(1, "model.safetensors")
	if err == nil {
		_, err = f.ReadAt(make([]byte, f.Size()), 0)
		f.Close()
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), id.String()) || !strings.Contains(err.Error(), loc.Pack.String()) {
		t.Fatalf("read of a damaged record: %v; want ErrCorrupt naming object %s and pack %s", err, id, loc.Pack)
	}
}

// TestPacksMissingPack: a pack that is gone is damage (ErrCorrupt), not a missing file.
func TestPacksMissingPack(t *testing.T) {
	s, root := newStore(t, Options{})
	commitTree(t, s, 1, moeVersions(t, 1, 20)[0])
	id, _, path := packedTensor(t, s, root, 1, "model.safetensors")
	if err := closeStore(t, s); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, root, Options{ReadOnly: true})
	expectDamage(r)
	f, err := r.be.OpenObject(id)
	if err == nil {
		f.Close()
	}
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("open of an object whose pack is gone: %v; want ErrCorrupt, not ErrNotExist", err)
	}
	_, err = r.OpenFile(1, "model.safetensors")
	if err == nil {
		var f File
		if f, err = r.OpenFile(1, "model.safetensors"); err == nil {
			_, err = f.ReadAt(make([]byte, f.Size()), 0)
			f.Close()
		}
	}
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read of a file whose pack is gone: %v", err)
	}
}

// TestPackFilesEviction: with fewer packs kept open than are read, every section stays
// readable until it is closed (a pack is closed only once no section reads it).
func TestPackFilesEviction(t *testing.T) {
	s, _ := newStore(t, Options{})
	for i, files := range moeVersions(t, 3, 5) {
		commitTree(t, s, uint64(i+1), files)
	}
	c := newPackFiles(s.be.packs.packs, 1)
	defer c.close()
	var open []ObjectFile
	packs := map[ID]bool{}
	err := s.be.ListObjects(func(id ID, _ int64) error {
		loc, ok := s.be.packs.locate(id)
		if !ok {
			return fmt.Errorf("object %s not packed", id)
		}
		packs[loc.Pack] = true
		f, err := c.section(id, loc)
		if err != nil {
			return err
		}
		open = append(open, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(packs) < 3 {
		t.Fatalf("%d packs", len(packs))
	}
	for _, f := range open {
		if err := checkCRC(f); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}
