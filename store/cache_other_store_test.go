package store

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/weightfs/weightfs/internal/logtest"
)

// indexEmptiedLog is what openIndex logs when it empties an index of another format or store.
const indexEmptiedLog = "index emptied"

// TestCacheDirOfAnotherStore opens a reader with the cache directory another store's reader
// used (a --cache-dir reused for another store): version summaries in the index are keyed by
// the version number alone, so store B's version list (the times `ls -l` shows as the
// versions' directories' mtimes, the sizes `weightfs log` shows) must not come from store A's.
// The index records its store and is emptied (logged). What else A's reader left in the
// directory is not trusted either: the materialized copy is adopted only by a record of the
// (emptied) index and is rebuilt, file copies are removed at open, and renders are named by a
// digest of the versions' content, so B's reads and B's patch are B's bytes.
func TestCacheDirOfAnotherStore(t *testing.T) {
	cache := t.TempDir()
	a, rootA := newStore(t, Options{})
	for i, files := range modelVersions(t, 2, 51) {
		commitTree(t, a, uint64(i+1), files)
	}
	closeStore(t, a)
	ra := openStore(t, rootA, Options{ReadOnly: true, CacheDir: cache, Materialize: true})
	if _, err := ra.RenderPatch(2); err != nil {
		t.Fatal(err)
	}
	closeStore(t, ra)
	time.Sleep(1100 * time.Millisecond) // B's versions are sealed in a later second
	b, rootB := newStore(t, Options{})
	versionsB := modelVersions(t, 3, 52)
	for i, files := range versionsB {
		commitTree(t, b, uint64(i+1), files)
	}
	want := b.Versions()
	patchFile := filepath.Join(t.TempDir(), "patch")
	f, err := os.Create(patchFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.WritePatch(2, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantPatch, err := os.ReadFile(patchFile)
	if err != nil {
		t.Fatal(err)
	}
	closeStore(t, b)

	log := &logLines{t: t}
	r := openStore(t, rootB, Options{ReadOnly: true, CacheDir: cache, Materialize: true, Logger: logtest.New(log.logf)})
	if !log.has(indexEmptiedLog, "another store") {
		t.Errorf("the log does not say the index of another store was emptied (%q)", indexEmptiedLog)
	}
	got := r.Versions()
	if len(got) != len(want) {
		t.Fatalf("reader lists %d versions, want %d", len(got), len(want))
	}
	for i := range want {
		if !got[i].Created.Equal(want[i].Created) || got[i].StoredBytes != want[i].StoredBytes {
			t.Errorf("version %d: reader says created %v, %d bytes stored; the store says %v, %d",
				want[i].Number, got[i].Created, got[i].StoredBytes, want[i].Created, want[i].StoredBytes)
		}
	}
	for i, files := range versionsB {
		for p, data := range files {
			mustEqualBytes(t, filepath.Join("version", string(rune('1'+i)), p), readWhole(t, r, uint64(i+1), p), data)
		}
	}
	rf, err := r.RenderPatch(2)
	if err != nil {
		t.Fatal(err)
	}
	gotPatch, err := os.ReadFile(rf.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(gotPatch, wantPatch) {
		t.Errorf("patch of version 2 from the reused cache: %d bytes, not store B's %d", len(gotPatch), len(wantPatch))
	}
	closeStore(t, r)

	// The same store again: its own index, kept.
	log = &logLines{t: t}
	closeStore(t, openStore(t, rootB, Options{ReadOnly: true, CacheDir: cache, Logger: logtest.New(log.logf)}))
	if log.has(indexEmptiedLog) {
		t.Errorf("the index was emptied when its own store reopened it")
	}
}

// TestIndexOfOlderProgram: an index that records no store (written before indexes recorded
// their store) is adopted in the store's own cache directory (its store is recorded, nothing
// else changes) and emptied in any other (it may be another store's); neither is an error.
func TestIndexOfOlderProgram(t *testing.T) {
	id := ID{7, 7, 7}
	for _, own := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "index.db")
		ix, err := openIndex(path, indexOwner{Store: "local:1-2", Own: own}, logtest.New(t.Logf))
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.putObjects(map[ID]objMeta{id: {Kind: kindFull, Width: 2, ContentLen: 5}}); err != nil {
			t.Fatal(err)
		}
		// As the older program left it: no meta/store.
		if err := ix.run(true, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyStore) }); err != nil {
			t.Fatal(err)
		}
		if err := ix.close(); err != nil {
			t.Fatal(err)
		}
		log := &logLines{t: t}
		ix, err = openIndex(path, indexOwner{Store: "local:1-2", Own: own}, logtest.New(log.logf))
		if err != nil {
			t.Fatalf("own %v: %v", own, err)
		}
		_, kept := ix.object(id)
		if kept != own || log.has(indexEmptiedLog) == own {
			t.Errorf("own cache directory %v: record kept %v, emptied (logged) %v; want kept %v", own, kept, log.has(indexEmptiedLog), own)
		}
		var store []byte
		if err := ix.run(false, func(tx *bolt.Tx) (err error) {
			store, err = get(tx, bucketMeta, keyStore)
			return err
		}); err != nil || string(store) != "local:1-2" {
			t.Errorf("own cache directory %v: store recorded %q (%v), want %q", own, store, err, "local:1-2")
		}
		ix.close()
	}
}
