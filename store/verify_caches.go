package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Verify also checks the node-local caches it can see: this process's materialized copy and
// render cache, and, for a local store, the writer's (STORE/cache). A cache is derived data:
// a damaged one is reported in VerifyReport.Caches and dropped (rebuilt when next needed),
// but it is not damage of the store, and Verify's error does not count it.

// CacheCheck is what Verify found in one node-local cache.
type CacheCheck struct {
	Name    string // "materialized copy" or "render cache"
	Path    string
	Checked bool // false: Note says why not
	Damaged bool
	Note    string
}

func (c CacheCheck) String() string {
	state := "ok"
	switch {
	case c.Damaged:
		state = "DAMAGED"
	case !c.Checked:
		state = "not checked"
	}
	return fmt.Sprintf("%s %s: %s: %s", c.Name, c.Path, state, c.Note)
}

// verifyCaches checks every node-local cache Verify can see.
func (c *checker) verifyCaches() []CacheCheck {
	s := c.st
	dirs := []string{s.cache.dir}
	if s.be.localDir != "" {
		if w := filepath.Join(s.root, "cache"); w != s.cache.dir {
			dirs = append(dirs, w)
		}
	}
	var out []CacheCheck
	for i, dir := range dirs {
		var cc CacheCheck
		if i == 0 {
			cc = c.verifyOwnCopy()
		} else {
			cc = c.verifyCopyAt(dir)
		}
		if cc.Name != "" {
			out = append(out, cc)
		}
		if cc, ok := c.verifyRenders(dir); ok {
			out = append(out, cc)
		}
	}
	return out
}

// verifyOwnCopy checks the copy this process keeps, every file against the manifest (SHA-256
// and objects); a damaged one is dropped and rebuilt.
func (c *checker) verifyOwnCopy() CacheCheck {
	s := c.st
	m := s.mat
	cc := CacheCheck{Name: "materialized copy", Path: m.path()}
	ver, exists, err := m.checkOwnFiles()
	if ver == nil {
		if !exists {
			return CacheCheck{}
		}
		cc.Note = "holds no version now (reads replay from the objects)"
		return cc
	}
	cc.Checked = true
	if err != nil && !isVerdictDamage(err) {
		// An I/O error is no verdict: the copy stays (a repair may need it as a source).
		cc.Note = fmt.Sprintf("version %d: not checked (an error of the check, not damage): %v", ver.m.Version, err)
		return cc
	}
	if err != nil {
		cc.Damaged = true
		cc.Note = fmt.Sprintf("version %d: %v; dropped, rebuilt from the objects", ver.m.Version, err)
		s.log.Warn("materialized copy: damaged; rebuilding", "err", err)
		m.failed(err)
		return cc
	}
	cc.Note = fmt.Sprintf("all %d files match version %d", len(ver.m.Files), ver.m.Version)
	return cc
}

// checkCopyFiles checks every file of ver in the copy at dir.
func checkCopyFiles(dir string, ver *version) error {
	for i := range ver.m.Files {
		if _, err := scanCopyFile(dir, &ver.m.Files[i], true); err != nil {
			return err
		}
	}
	return nil
}

// verifyCopyAt checks the copy another process keeps in cacheDir (the writer's), if its
// index can be read: a running writer holds it, and checks every read of its copy itself.
// A damaged copy is marked not clean, so the writer rebuilds it when it next opens.
func (c *checker) verifyCopyAt(cacheDir string) CacheCheck {
	s := c.st
	dir := filepath.Join(cacheDir, "materialized")
	if _, err := os.Stat(dir); err != nil {
		return CacheCheck{}
	}
	cc := CacheCheck{Name: "materialized copy", Path: dir}
	ixPath := filepath.Join(cacheDir, "index.db")
	if err := checkCacheFile(ixPath); err != nil {
		cc.Note = fmt.Sprintf("its index cannot be read (%v): the writer rebuilds both", err)
		return cc
	}
	db, err := bolt.Open(ixPath, cacheFilePerm, &bolt.Options{ReadOnly: true, Timeout: 200 * time.Millisecond})
	if errors.Is(err, berrors.ErrTimeout) {
		cc.Note = "in use by a running writer, which checks every read of it against its sums"
		return cc
	}
	if err != nil {
		cc.Note = fmt.Sprintf("its index cannot be read (%v): the writer rebuilds both", err)
		return cc
	}
	var st matState
	// Another process's index may be damaged too: guard turns bbolt's panics into errors, and
	// a record failing its CRC leaves st zero (no clean copy to check).
	guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			js, err := get(tx, bucketMeta, keyMaterial)
			if err == nil && js != nil {
				json.Unmarshal(js, &st)
			}
			return nil
		})
	})
	closeIndexDB(db)
	if !st.Clean || !s.versions.isSealed(st.Version) {
		cc.Note = "holds no clean sealed version (rebuilt before use)"
		return cc
	}
	ver, err := s.versions.loadVersion(st.Version)
	if err != nil {
		cc.Note = fmt.Sprintf("version %d cannot be read: %v", st.Version, err)
		return cc
	}
	cc.Checked = true
	if err := checkCopyFiles(dir, ver); err != nil {
		cc.Damaged = true
		cc.Note = fmt.Sprintf("version %d: %v", st.Version, err)
		if derr := dropCopyState(ixPath, st.Version); derr != nil {
			cc.Note += fmt.Sprintf("; not dropped (%v): the writer's reads still check it", derr)
		} else {
			cc.Note += "; dropped (marked not clean): the writer rebuilds it when it next opens"
		}
		return cc
	}
	cc.Note = fmt.Sprintf("all %d files match version %d", len(ver.m.Files), ver.m.Version)
	return cc
}

// dropCopyState marks the copy of another process's index not clean.
func dropCopyState(ixPath string, v uint64) error {
	db, err := bolt.Open(ixPath, cacheFilePerm, &bolt.Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	defer closeIndexDB(db)
	js, _ := json.Marshal(matState{Version: v})
	return guard(func() error {
		return db.Update(func(tx *bolt.Tx) error { return put(tx, bucketMeta, keyMaterial, js) })
	})
}

// verifyRenders renders again every cached patch and slime delta of cacheDir whose key is
// still current and compares the bytes; a render that differs is removed (rendered again
// when next asked for). ok is false when there is no render cache.
func (c *checker) verifyRenders(cacheDir string) (CacheCheck, bool) {
	root := filepath.Join(cacheDir, "render")
	if _, err := os.Stat(root); err != nil {
		return CacheCheck{}, false
	}
	cc := CacheCheck{Name: "render cache", Path: root, Checked: true}
	var checked, stale int
	var bad, unreadable []string
	for _, kind := range []string{"patches", "deltas"} {
		ents, _ := os.ReadDir(filepath.Join(root, kind))
		for _, e := range ents {
			name := e.Name()
			v, ok := renderVersion(name)
			if !ok || strings.HasSuffix(name, patchSumsSuffix) { // a patch's sums: checked with it
				continue
			}
			err := c.checkRender(kind, v, filepath.Join(root, kind, name), name)
			switch {
			case errors.Is(err, errStaleRender):
				stale++
			case err != nil && !isVerdictDamage(err):
				// The fresh render could not be made (an I/O error): no verdict, the render
				// stays.
				unreadable = append(unreadable, fmt.Sprintf("%s/%s: %v", kind, name, err))
			case err != nil:
				bad = append(bad, fmt.Sprintf("%s/%s: %v", kind, name, err))
				os.RemoveAll(filepath.Join(root, kind, name))
				if kind == "patches" {
					os.Remove(filepath.Join(root, kind, strings.TrimSuffix(name, ".safetensors")+patchSumsSuffix))
				}
			default:
				checked++
			}
		}
	}
	cc.Note = fmt.Sprintf("%d renders match a fresh render, %d stale ones not checked", checked, stale)
	if len(unreadable) > 0 {
		cc.Note += fmt.Sprintf("; %d not checked (an error of the check, not damage): %s", len(unreadable), strings.Join(unreadable, "; "))
	}
	if len(bad) > 0 {
		cc.Damaged = true
		cc.Note += fmt.Sprintf("; %d damaged, removed (rendered again when asked for): %s", len(bad), strings.Join(bad, "; "))
	}
	return cc, true
}

var errStaleRender = errors.New("stale render")

// renderVersion parses the version of a render's name, vNNNNNN-KEY[.safetensors].
func renderVersion(name string) (uint64, bool) {
	num, _, ok := strings.Cut(strings.TrimPrefix(name, "v"), "-")
	if !ok || !strings.HasPrefix(name, "v") {
		return 0, false
	}
	v, err := strconv.ParseUint(num, 10, 64)
	return v, err == nil
}

// checkRender renders the patch or delta of v again and compares it with the cached one at
// p; errStaleRender: p is not the render of v's current inputs.
func (c *checker) checkRender(kind string, v uint64, p, name string) error {
	s := c.st
	tmp, err := s.renders.renderTemp()
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if kind == "patches" {
		cur, base, err := s.renders.patchVersions(v)
		if err != nil || name != renderName(v, renderKey("patch", cur, base))+".safetensors" {
			return errStaleRender
		}
		fresh := filepath.Join(tmp, "patch.safetensors")
		if err := s.renders.writePatchFile(v, fresh); err != nil {
			return err
		}
		if err := sameFile(p, fresh); err != nil {
			return err
		}
		// Its sums must be the fresh bytes' (they check every read).
		sumsPath := strings.TrimSuffix(p, ".safetensors") + patchSumsSuffix
		freshSums := filepath.Join(tmp, "patch"+patchSumsSuffix)
		if _, err := s.renders.writePatchSums(fresh, freshSums, p, sumsPath); err != nil {
			return err
		}
		if err := sameFile(sumsPath, freshSums); err != nil {
			return fmt.Errorf("sums: %w", err)
		}
		return nil
	}
	plan, err := s.PlanSlime(v)
	if err != nil || plan.Kind != SlimeDelta {
		return errStaleRender
	}
	cur, err1 := s.versions.sealedVersion(v)
	base, err2 := s.versions.sealedVersion(plan.Base)
	if err1 != nil || err2 != nil || name != renderName(v, renderKey("slime", cur, base)) {
		return errStaleRender
	}
	files, err := s.renders.writeSlimeDelta(cur, base, tmp)
	if err != nil {
		return err
	}
	for _, f := range append(files, RenderedFile{Name: slimeRenderFile}) { // render.json: sizes, sums
		if err := sameFile(filepath.Join(p, f.Name), filepath.Join(tmp, f.Name)); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
	}
	return nil
}

// sameFile compares two files' bytes.
func sameFile(a, b string) error {
	fa, err := openCacheFile(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := openCacheFile(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); ; {
		na, ea := io.ReadFull(fa, ba)
		nb, _ := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return fmt.Errorf("differs from a fresh render near byte %d: %w", off, ErrCorrupt)
		}
		if ea != nil {
			return nil
		}
		off += int64(na)
	}
}
