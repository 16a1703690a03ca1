//go:build linux

package store

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestCacheDirOfACopiedStore: a store copied with cp -a (times kept) into two fresh file
// systems has the same inode numbers in both; each copy then seals its own version 3. A
// reader's cache directory used for one copy and then the other must serve the second's
// version 3, not the first's summaries or bytes.
func TestCacheDirOfACopiedStore(t *testing.T) {
	tmpl, tmplRoot := newStore(t, Options{})
	versions := modelVersions(t, 4, 61)
	commitAll(t, tmpl, versions[:2])
	closeStore(t, tmpl)
	var roots [2]string
	for i := range roots {
		disk, _ := smallDisk(t, 64<<20)
		roots[i] = filepath.Join(disk, "store")
		if out, err := exec.Command("cp", "-a", tmplRoot, roots[i]).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v: %s", err, out)
		}
	}
	for i := range roots {
		id, err := localStoreID(roots[i])
		t.Logf("copy %d: %s, %v", i, id, err)
	}
	// Each copy seals its own version 3: copy 0 the third of versions, copy 1 the fourth.
	var want [2][]VersionInfo
	for i, root := range roots {
		s := openStore(t, root, Options{})
		time.Sleep(10 * time.Millisecond)
		commitTree(t, s, 3, versions[2+i])
		want[i] = s.Versions()
		closeStore(t, s)
	}
	cache := t.TempDir()
	for i, root := range roots {
		r := openStore(t, root, Options{ReadOnly: true, CacheDir: cache, Materialize: true})
		got := r.Versions()
		for k := range want[i] {
			if k >= len(got) || !got[k].Created.Equal(want[i][k].Created) || got[k].StoredBytes != want[i][k].StoredBytes {
				t.Errorf("copy %d, version %d: the reader lists %+v, the store holds %+v", i, want[i][k].Number, got, want[i][k])
			}
		}
		for p, data := range versions[2+i] {
			mustEqualBytes(t, "copy "+string(rune('0'+i))+" v3 "+p, readWhole(t, r, 3, p), data)
		}
		closeStore(t, r)
	}
}
