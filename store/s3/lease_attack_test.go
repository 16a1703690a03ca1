package s3

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store"
)

// TestS3LeaseDamagedWhileWriting: the lease object is overwritten (garbage, zero bytes) while a
// writer holds it. A second writer is refused with an error that says how to break it (it
// must not take a lease it cannot read); the first finds the lease lost at its next seal and
// seals nothing (ErrLocked); the versions sealed before read right; after 'lease break' a new
// writer seals.
func TestS3LeaseDamagedWhileWriting(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
	}{{"garbage", []byte("{\"format\":\"weightfs-lease-1\",\"tok")}, {"empty", nil}} {
		t.Run(c.name, func(t *testing.T) {
			srv, url := startInitialized(t)
			dir := srv.ObjectDir("weightfs-test", strings.TrimPrefix(url, "s3://weightfs-test/"))
			w := openTestStore(t, url, store.Options{})
			m := newTestModel(9, 20_000)
			v1 := m.files(t)
			commitTree(t, w, 1, v1)
			// Through S3, not the server's files: the posix backend keeps an object's ETag
			// in an extended attribute that a plain write of the file leaves in place.
			cl, err := setup(url, Config{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cl.putBytes(context.Background(), cl.loc.key(leaseKey), c.b, putCond{}); err != nil {
				t.Fatal(err)
			}
			w2, err := Open(url, Config{}, store.Options{CacheDir: t.TempDir()})
			if err == nil {
				w2.Close()
				t.Fatal("a second writer opened a store whose lease is damaged while the first writes")
			}
			if !strings.Contains(err.Error(), "lease break") {
				t.Errorf("second writer: %v, want an error that says how to break the lease", err)
			}
			m.step()
			tree := writeTree(t, t.TempDir(), m.files(t))
			if _, err := w.Commit(tree, store.CommitOptions{Version: 2}); !errors.Is(err, store.ErrLocked) {
				t.Fatalf("commit by the writer whose lease was overwritten: %v, want store.ErrLocked", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "versions", store.ManifestName(2))); err == nil {
				t.Fatal("version 2 was sealed under a damaged lease")
			}
			w.Close()
			if _, err := BreakLease(url, Config{}, nil); err != nil {
				t.Fatalf("break a damaged lease: %v", err)
			}
			w3 := openTestStore(t, url, store.Options{})
			mustEqualBytes(t, "v1 after the lease was damaged", readWhole(t, w3, 1, "model.safetensors"), v1["model.safetensors"])
			if _, err := w3.Commit(tree, store.CommitOptions{Version: 2}); err != nil {
				t.Fatalf("commit after the damaged lease was broken: %v", err)
			}
		})
	}
}
