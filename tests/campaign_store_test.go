package tests

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

// The campaign's pristine store: built once per test run, copied afresh for every trial.
//
//	WORK/store            the store; v1..v4 committed with MaxChain 2 (v4's changed tensors
//	                      are anchors that keep their link), v5 written through a read-write
//	                      mount, so STORE/cache holds the writer's index, its materialized copy
//	                      (at v5) and renders of every patch and delta
//	WORK/rocache          a read-only mount's persistent --cache-dir: its index, its copy and
//	                      its renders, made by a read-only mount of the finished store
//	WORK/next             the next checkpoint, which each trial's read-write mount seals
const (
	campaignParams   = 500_000
	campaignVersions = 5
	campaignMaxChain = 2 // makes v4 an anchor version: chains of two deltas, then a whole copy
)

// campaignStore is the pristine store and everything a trial checks against.
type campaignStore struct {
	dir     string                    // WORK: store/ and rocache/ under it
	want    map[int]map[string]string // version -> file -> SHA-256 (from the sources)
	views   map[string]string         // "patches/NAME" or "deltas/DIR/NAME" -> SHA-256
	objects map[string]campaignObject // object id -> what it is and who names it
	latest  string                    // the latest version's directory name
	next    string                    // the source of version campaignVersions+1 (want has it)
}

// campaignObject says what an object holds, for failure messages and for knowing which versions
// name it directly.
type campaignObject struct {
	rep      string         // "full", "anchor" (full with a link), "delta"
	versions map[int]string // version -> the first file (and tensor) that names it
}

func (c *campaignStore) storeDir() string   { return filepath.Join(c.dir, "store") }
func (c *campaignStore) roCacheDir() string { return filepath.Join(c.dir, "rocache") }

var (
	campaignPristineMu sync.Mutex
	campaignPristine   *campaignStore
)

// sharedCampaignStore is buildCampaignStore once per test binary (TestCampaign and
// TestCampaignAttacks copy the same pristine store), under testRoot, which TestMain removes.
// Trials copy it and never change it.
func sharedCampaignStore(t *testing.T) *campaignStore {
	t.Helper()
	campaignPristineMu.Lock()
	defer campaignPristineMu.Unlock()
	if campaignPristine == nil {
		work, err := os.MkdirTemp(testRoot, "campaign-")
		if err != nil {
			t.Fatal(err)
		}
		campaignPristine = buildCampaignStore(t, work)
	}
	return campaignPristine
}

// buildCampaignStore makes the pristine store (see above) in the empty directory work and
// records its hashes. It fails the test if the store does not hold what the campaign means to
// attack.
func buildCampaignStore(t *testing.T, work string) *campaignStore {
	t.Helper()
	c := &campaignStore{dir: work, want: map[int]map[string]string{}, views: map[string]string{}}
	storeDir := c.storeDir()
	initStore(t, storeDir)
	cfg := gen.ConfigForParams(campaignParams, 3e-6, 15)
	cfg.Shards = 2
	m, err := gen.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srcs := filepath.Join(work, "src")
	for v := 1; v <= campaignVersions+1; v++ { // the last one is sealed by each trial
		if v > 1 {
			m.Step()
		}
		src := srcDir(srcs, v)
		if err := m.WriteCheckpoint(src); err != nil {
			t.Fatal(err)
		}
		c.want[v] = treeHashes(t, src)
	}
	st, err := store.Open(storeDir, store.Options{MaxChain: campaignMaxChain})
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v < campaignVersions; v++ {
		if _, err := st.Commit(srcDir(srcs, v), store.CommitOptions{Version: uint64(v)}); err != nil {
			st.Close()
			t.Fatalf("commit v%d: %v", v, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// The last version through a read-write mount: the writer's copy ends at it, and reading
	// every view fills the writer's render cache.
	rw := filepath.Join(work, "mnt")
	if err := os.Mkdir(rw, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startMount(t, storeDir, rw)
	run(t, "cp", "-r", srcDir(srcs, campaignVersions), versionDir(rw, campaignVersions))
	run(t, "touch", filepath.Join(versionDir(rw, campaignVersions), "DONE"))
	c.views = campaignReadViews(t, rw)
	d.stop()

	// A read-only mount with a persistent cache directory: its copy and its renders.
	d = startMount(t, storeDir, rw, "--read-only", "--cache-dir", c.roCacheDir())
	roViews := campaignReadViews(t, rw)
	link, err := os.Readlink(filepath.Join(rw, "latest"))
	if err != nil {
		t.Fatal(err)
	}
	c.latest = link
	d.stop()
	sameHashes(t, "pristine: views of the read-only mount against the read-write mount's", roViews, c.views)
	if t.Failed() {
		t.FailNow()
	}
	c.next = filepath.Join(work, "next")
	if err := os.Rename(srcDir(srcs, campaignVersions+1), c.next); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(srcs)

	// What the campaign attacks must be there.
	for _, cache := range []string{filepath.Join(storeDir, "cache"), c.roCacheDir()} {
		sameHashes(t, "pristine: materialized copy in "+cache, treeHashes(t, filepath.Join(cache, "materialized")), c.want[campaignVersions])
		for _, kind := range []campaignKind{kindIndex, kindCopy, kindRender} {
			if len(kind.files(cache)) == 0 {
				t.Errorf("pristine: no %s files in %s", kind.name, cache)
			}
		}
	}
	c.objects = campaignObjectUses(t, storeDir)
	reps := map[string]int{}
	for _, u := range c.objects {
		reps[u.rep]++
	}
	if reps["anchor"] == 0 || reps["delta"] < 3 {
		t.Errorf("pristine: objects %v: want at least one anchor and several deltas", reps)
	}
	if r := runCLI(t, "verify", storeDir); r.code != 0 {
		t.Errorf("pristine store does not verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("pristine store: %d versions (%s latest), %d objects %v, %d view files",
		campaignVersions, c.latest, len(c.objects), reps, len(c.views))
	return c
}

// campaignReadViews reads every file under MNT/patches and MNT/deltas and returns their hashes.
func campaignReadViews(t *testing.T, mnt string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, view := range []string{"patches", "deltas"} {
		for name, sum := range treeHashes(t, filepath.Join(mnt, view)) {
			got[view+"/"+name] = sum
		}
	}
	if len(got) == 0 {
		t.Fatalf("%s: no files under patches/ or deltas/", mnt)
	}
	return got
}

// campaignObjectUses reads every manifest of a store (their JSON, without the library) and every
// object's header, and says of every object whether it is a full copy, an anchor or a delta
// and which versions name it.
func campaignObjectUses(t *testing.T, storeDir string) map[string]campaignObject {
	t.Helper()
	uses := map[string]campaignObject{}
	heads := campaignPackedHeaders(t, storeDir) // a store of packs (format 3): its records
	for _, p := range kindObject.files(storeDir) {
		data, err := os.ReadFile(p)
		if err != nil || len(data) < 96 {
			t.Fatalf("object %s: %v (%d bytes)", p, err, len(data))
		}
		heads[filepath.Base(p)] = data[:96]
	}
	for id, data := range heads {
		if len(data) < 96 {
			t.Fatalf("object %s: a record of %d bytes", id, len(data))
		}
		rep := "full"
		switch {
		case data[6] == 2:
			rep = "delta"
		case !bytes.Equal(data[48:80], make([]byte, 32)):
			rep = "anchor"
		}
		uses[id] = campaignObject{rep: rep, versions: map[int]string{}}
	}
	for _, p := range kindManifest.files(storeDir) {
		m := campaignReadManifest(t, p)
		for _, f := range m.Files {
			name := func(id, what string) {
				if u, ok := uses[id]; ok {
					if _, seen := u.versions[m.Version]; !seen {
						u.versions[m.Version] = f.Path + what
					}
				}
			}
			name(f.ID, "")
			name(f.Header, " (header)")
			for _, tn := range f.Tensors {
				name(tn.ID, " tensor "+tn.Name)
			}
		}
	}
	return uses
}

// campaignManifest is the part of a manifest (docs/format.md §4) the campaign needs.
type campaignManifest struct {
	Version int `json:"version"`
	Files   []struct {
		Path    string `json:"path"`
		ID      string `json:"id"`
		Header  string `json:"header"`
		Tensors []struct {
			Name string `json:"name"`
			ID   string `json:"id"`
		} `json:"tensors"`
	} `json:"files"`
}

func campaignReadManifest(t *testing.T, p string) campaignManifest {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 20 || string(data[:4]) != "WFSM" {
		t.Fatalf("manifest %s: not a manifest", p)
	}
	n := binary.LittleEndian.Uint64(data[8:16])
	var m campaignManifest
	if n > uint64(len(data)-20) || json.Unmarshal(data[16:16+n], &m) != nil {
		t.Fatalf("manifest %s: cannot read its JSON", p)
	}
	return m
}

// campaignKind is one kind of file the campaign damages. files lists them under root (the store
// for store kinds, a cache directory for cache kinds), sorted.
type campaignKind struct {
	name  string
	cache bool // node-local: damage is repaired, never reported as store damage
	files func(root string) []string
}

var (
	kindObject = campaignKind{"object", false, func(root string) []string {
		return campaignRegularFiles(filepath.Join(root, "objects"), func(rel string) bool { return campaignIsHexID(filepath.Base(rel)) })
	}}
	kindManifest = campaignKind{"manifest", false, func(root string) []string {
		return campaignRegularFiles(filepath.Join(root, "versions"), func(rel string) bool { return strings.HasPrefix(rel, "v") })
	}}
	kindFormat = campaignKind{"format", false, func(root string) []string {
		return campaignExisting(filepath.Join(root, "weightfs-store"))
	}}
	kindIndex = campaignKind{"index", true, func(root string) []string {
		return campaignExisting(filepath.Join(root, "index.db"))
	}}
	kindCopy = campaignKind{"copy", true, func(root string) []string {
		return campaignRegularFiles(filepath.Join(root, "materialized"), nil)
	}}
	kindRender = campaignKind{"render", true, func(root string) []string {
		return campaignRegularFiles(filepath.Join(root, "render"), func(rel string) bool { return !strings.HasPrefix(rel, "tmp/") })
	}}
	campaignKinds = []campaignKind{kindObject, kindManifest, kindIndex, kindCopy, kindFormat, kindRender}
)

// campaignRegularFiles lists the regular files under dir whose slash path relative to dir passes
// keep (nil: all), sorted. A missing dir has none.
func campaignRegularFiles(dir string, keep func(rel string) bool) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if keep == nil || keep(filepath.ToSlash(rel)) {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// campaignExisting is the file p as a list: empty when it is not a regular file.
func campaignExisting(p string) []string {
	if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
		return []string{p}
	}
	return nil
}

func campaignIsHexID(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32
}

// campaignCopyTree copies the directory src to dst (which must not exist): directories, regular
// files with their modes; a store and its caches hold nothing else.
func campaignCopyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case d.Type().IsRegular():
			return campaignCopyFile(p, target, info.Mode().Perm())
		case d.Type()&fs.ModeSocket != 0, d.Type()&fs.ModeNamedPipe != 0:
			return nil
		}
		return fmt.Errorf("copy %s: unexpected file type %v", p, d.Type())
	})
}

func campaignCopyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o200)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}

// errNoTarget says a trial found no file of its kind to damage.
var errNoTarget = errors.New("no file of this kind")
