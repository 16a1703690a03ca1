package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	iofs "io/fs"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/pack"
)

// eioFS is a FUSE loopback of a directory whose reads of chosen files fail with EIO while
// their bytes are intact: always, or the first n times (a transient error). Opened files
// are served with direct I/O, so that every read reaches it (no page cache in between).
type eioFS struct {
	mu    sync.Mutex
	fails map[string]int // path relative to the root -> reads left to fail (< 0: every read)
	hits  map[string]int // reads failed, by path
}

// mountEIOFS mounts a loopback of dir at mnt, unmounted when the test ends.
func mountEIOFS(t *testing.T, dir, mnt string) *eioFS {
	t.Helper()
	skipWithoutFUSE(t)
	efs := &eioFS{fails: map[string]int{}, hits: map[string]int{}}
	rootNode, err := fs.NewLoopbackRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	root := &eioNode{LoopbackNode: rootNode.(*fs.LoopbackNode), efs: efs}
	server, err := fs.Mount(mnt, root, &fs.Options{MountOptions: fuse.MountOptions{FsName: "eiofs", DisableXAttrs: true}})
	if err != nil {
		t.Fatalf("mount the EIO loopback: %v", err)
	}
	t.Cleanup(func() {
		if err := server.Unmount(); err != nil {
			t.Errorf("unmount the EIO loopback: %v", err)
		}
	})
	return efs
}

// failReads makes the next n reads of rel fail with EIO (n < 0: every read; 0: none).
func (e *eioFS) failReads(rel string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fails[rel] = n
	e.hits[rel] = 0
}

func (e *eioFS) failed(rel string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hits[rel]
}

func (e *eioFS) fail(rel string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.fails[rel]
	if n == 0 {
		return false
	}
	if n > 0 {
		e.fails[rel] = n - 1
	}
	e.hits[rel]++
	return true
}

type eioNode struct {
	*fs.LoopbackNode
	efs *eioFS
}

var (
	_ = (fs.NodeOpener)((*eioNode)(nil))
	_ = (fs.NodeWrapChilder)((*eioNode)(nil))
)

// WrapChild makes every node under the root an eioNode (go-fuse calls it for each new one).
func (n *eioNode) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &eioNode{LoopbackNode: ops.(*fs.LoopbackNode), efs: n.efs}
}

func (n *eioNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return fh, fl, errno
	}
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return fh, fl, 0
	}
	return &eioFile{LoopbackFile: lf, rel: n.Path(nil), efs: n.efs}, fl | fuse.FOPEN_DIRECT_IO, 0
}

type eioFile struct {
	*fs.LoopbackFile
	rel string
	efs *eioFS
}

func (f *eioFile) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if f.efs.fail(f.rel) {
		return nil, syscall.EIO
	}
	return f.LoopbackFile.Read(ctx, buf, off)
}

// TestVerifyRepairEIO: a file system that returns EIO for an object whose bytes are intact
// (permanently, or once) used to make verify print DAMAGED for it and verify --repair move
// the versions that need it into quarantine (issue 27). An I/O error is no verdict: verify
// says UNREADABLE, exits non-zero and prints no DAMAGED line; --repair (and its dry run)
// moves nothing; a transient error is read again and the store is found sound.
func TestVerifyRepairEIO(t *testing.T) {
	skipWithoutFUSE(t)
	weightfsBin(t)
	c := sharedCampaignStore(t)
	// A delta object that versions name: the one whose damage used to cost the most.
	var id string
	for o, u := range c.objects {
		if u.rep == "delta" && len(u.versions) > 0 && (id == "" || o < id) {
			id = o
		}
	}
	if id == "" {
		t.Fatal("no delta object in the campaign store")
	}
	under, storeDir, efs := eioStore(t, c)
	rel := objectFileOf(t, under, id)
	n := manifestCount(t, under)

	efs.failReads(rel, -1)
	r := runCLI(t, "verify", storeDir)
	if r.code == 0 || strings.Contains(r.stdout, "DAMAGED") || !strings.Contains(r.stdout, "UNREADABLE") || !strings.Contains(r.stdout+r.stderr, "input/output error") {
		t.Errorf("verify with EIO for object %s: exit %d\nstdout: %s\nstderr: %s\nwant a non-zero exit, UNREADABLE, no DAMAGED", id[:12], r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"verify", "--repair", "--dry-run", storeDir}, {"verify", "--repair", storeDir}} {
		r = runCLI(t, args...)
		if r.code == 0 || strings.Contains(r.stdout, "QUARANTINED") || strings.Contains(r.stdout, "DAMAGED") {
			t.Errorf("%v with EIO for object %s: exit %d\nstdout: %s\nstderr: %s\nwant a non-zero exit, nothing moved", args, id[:12], r.code, r.stdout, r.stderr)
		}
	}
	if efs.failed(rel) == 0 {
		t.Fatalf("no read of %s reached the file system", rel)
	}
	nothingMoved(t, under, n, "verify --repair with EIO")

	// Transient: the first read fails, the next ones do not.
	efs.failReads(rel, 1)
	r = runCLI(t, "verify", "--repair", storeDir)
	if r.code != 0 || strings.Contains(r.stdout, "QUARANTINED") {
		t.Errorf("verify --repair with one EIO for object %s: exit %d\nstdout: %s\nstderr: %s\nwant exit 0, nothing moved", id[:12], r.code, r.stdout, r.stderr)
	}
	nothingMoved(t, under, n, "verify --repair with a transient EIO")
	efs.failReads(rel, 0)
	if r := runCLI(t, "verify", storeDir); r.code != 0 {
		t.Errorf("verify once the file system reads: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestVerifyRepairEIOEveryKind: EIO (always, then once) for a file of each of the campaign's
// damage kinds (an object, a manifest, the format file, the writer's index, a file of its
// materialized copy, a cached render): verify and verify --repair (and its dry run) never
// call it damage and never move anything; once the file system reads, the store verifies.
func TestVerifyRepairEIOEveryKind(t *testing.T) {
	skipWithoutFUSE(t)
	weightfsBin(t)
	c := sharedCampaignStore(t)
	g := newCampaignGroup(t) // a few at a time, as the campaign's trials: each has its own copy and loopback
	for _, kind := range campaignKinds {
		for _, fails := range []int{-1, 1} {
			name := kind.name + "/always"
			if fails > 0 {
				name = kind.name + "/once"
			}
			g.run(name, func(t *testing.T) {
				under, storeDir, efs := eioStore(t, c)
				root := filepath.Join(under, "store")
				if kind.cache {
					root = filepath.Join(root, "cache")
				}
				files := kind.files(root)
				if len(files) == 0 && kind.name == "object" {
					// A store of format 3: its objects are records of packs.
					files = packFilesBelow(filepath.Join(root, "packs"))
				}
				if len(files) == 0 {
					t.Fatalf("no %s file under %s", kind.name, root)
				}
				rel, err := filepath.Rel(under, files[len(files)/2])
				if err != nil {
					t.Fatal(err)
				}
				n := manifestCount(t, under)
				efs.failReads(rel, fails)
				for _, args := range [][]string{{"verify", storeDir}, {"verify", "--repair", "--dry-run", storeDir}, {"verify", "--repair", storeDir}} {
					r := runCLI(t, args...)
					if strings.Contains(r.stdout, "QUARANTINED") || storeDamageLines(r.stdout) != nil || campaignCrashed(r.code, r.stdout+r.stderr) {
						t.Errorf("%v with EIO (%d) for %s: exit %d\nstdout: %s\nstderr: %s\nwant no DAMAGED line for the store and nothing moved", args, fails, rel, r.code, r.stdout, r.stderr)
					}
				}
				nothingMoved(t, under, n, "verify --repair with EIO for "+rel)
				if efs.failed(rel) == 0 {
					t.Errorf("no read of %s failed: the verify runs did not read it, and the test showed nothing", rel)
				}
				efs.failReads(rel, 0)
				if r := runCLI(t, "verify", storeDir); r.code != 0 {
					t.Errorf("verify once the file system reads %s: exit %d\n%s%s", rel, r.code, r.stdout, r.stderr)
				}
			})
		}
	}
	g.wait()
}

// eioStore copies the campaign's pristine store (and its writer's cache) and mounts the EIO
// loopback over the copy; storeDir is the store seen through it.
func eioStore(t *testing.T, c *campaignStore) (under, storeDir string, efs *eioFS) {
	t.Helper()
	work := t.TempDir()
	under = filepath.Join(work, "under")
	if err := campaignCopyTree(c.dir, under); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return under, filepath.Join(mnt, "store"), mountEIOFS(t, under, mnt)
}

func manifestCount(t *testing.T, under string) int {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(under, "store", "versions"))
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// nothingMoved fails the test if a manifest left versions/ or quarantine/ exists.
func nothingMoved(t *testing.T, under string, manifests int, what string) {
	t.Helper()
	if got := manifestCount(t, under); got != manifests {
		t.Fatalf("%d manifests after %s, %d before", got, what, manifests)
	}
	if _, err := os.Stat(filepath.Join(under, "store", "quarantine")); !os.IsNotExist(err) {
		t.Fatalf("quarantine/ after %s: %v", what, err)
	}
}

// objectFileOf is the file (relative to under, the directory above the store) that holds
// object id: its loose object file, or the pack an index of the store names for it (store
// format 3).
func objectFileOf(t *testing.T, under, id string) string {
	t.Helper()
	loose := filepath.Join("store", "objects", id[:2], id)
	if _, err := os.Stat(filepath.Join(under, loose)); err == nil {
		return loose
	}
	want, err := store.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	names, _ := os.ReadDir(filepath.Join(under, "store", "index"))
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(under, "store", "index", n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		x, err := pack.DecodeIndex(b)
		if err != nil {
			t.Fatalf("index %s: %v", n.Name(), err)
		}
		for _, p := range x.Packs {
			if _, ok := pack.Find(p.Entries, want); ok {
				h := store.ID(p.ID).String()
				return filepath.Join("store", "packs", h[:2], h)
			}
		}
	}
	t.Fatalf("object %s is neither a loose object nor in a pack an index names", id[:12])
	return ""
}

// packFilesBelow lists the pack files below dir.
func packFilesBelow(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	return out
}
