package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/internal/testfiles"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
)

// TestS3GroupStoresWhatOneWriterStores: 4 ranks (each a Store of its own, with its own cache
// directory, as 4 processes would have) write 3 versions of a 4-shard generated checkpoint
// into a store on the S3 test server, the writer (which holds the lease) publishes each; every
// object and manifest in the bucket is the bytes one local writer stores for the same series,
// no part record is left, and a reader of the bucket verifies and reads every version.
func TestS3GroupStoresWhatOneWriterStores(t *testing.T) {
	// It compares the object files of the bucket and of a local store (store format 2's
	// layout: in format 3 the ranks and the one writer write packs of their own).
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1")
	srv := s3test.Start(t)
	srv.SetEnv(t)
	const bucket, prefix, ranks = "weightfs-test", "group", 4
	url := "s3://" + bucket + "/" + prefix
	if err := location.Init(url, false, location.Options{}); err != nil {
		t.Fatal(err)
	}
	series := testfiles.ShardedSeries(t, 3, 23)

	local := filepath.Join(t.TempDir(), "store")
	if err := location.Init(local, false, location.Options{}); err != nil {
		t.Fatal(err)
	}
	single := openLocation(t, local, store.Options{})
	fixClock(single)
	for i, files := range series {
		w, err := single.NewVersion(uint64(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range namesOf(files) {
			if err := w.AddFile(n, bytes.NewReader(files[n]), int64(len(files[n])), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Seal(); err != nil {
			t.Fatal(err)
		}
	}
	if err := single.Close(); err != nil {
		t.Fatal(err)
	}

	pub := openLocation(t, url, store.Options{})
	fixClock(pub)
	var rs []*store.Store
	for r := range ranks {
		s, err := location.OpenRank(url, store.Rank{Group: "train", Rank: r, Ranks: ranks},
			location.Options{Options: store.Options{CacheDir: t.TempDir(), Logger: logtest.New(t.Logf)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		rs = append(rs, s)
	}
	rd := openLocation(t, url, store.Options{ReadOnly: true, Materialize: true})
	for i, files := range series {
		v := uint64(i + 1)
		var wg sync.WaitGroup
		errs := make([]error, ranks)
		for r, s := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = writeShards(s, v, files, r, ranks)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("parts of version %d: %v", v, err)
		}
		if err := rd.Refresh(); err != nil {
			t.Fatal(err)
		}
		if _, ok := rd.Latest(); ok && v == 1 {
			t.Fatal("a reader sees a version before it is published")
		}
		if _, err := pub.PublishGroup("train", v, ranks); err != nil {
			t.Fatalf("publish version %d: %v", v, err)
		}
		if err := rd.Refresh(); err != nil {
			t.Fatal(err)
		}
		for _, n := range namesOf(files) {
			f, err := rd.OpenFile(v, n)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, f.Size())
			if _, err := f.ReadAt(b, 0); err != nil || !bytes.Equal(b, files[n]) {
				t.Fatalf("reader: version %d %s differs (%v)", v, n, err)
			}
			f.Close()
		}
	}
	if rep, err := rd.Verify(nil); err != nil {
		t.Fatalf("verify: %v (%v)", err, rep.Damaged)
	}
	dir := srv.ObjectDir(bucket, prefix)
	if got, want := storedBytesHash(t, dir), storedBytesHash(t, local); got != want {
		t.Fatalf("4 ranks on S3 stored objects and manifests hashing to %s, one local writer %s", got, want)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "groups", "*", "*", "*")); len(left) != 0 {
		t.Fatalf("part records left in the bucket: %v", left)
	}
}

func namesOf(files map[string][]byte) []string {
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// writeShards writes rank r's part of version v: shard r+1, and the other files on rank 0.
func writeShards(s *store.Store, v uint64, files map[string][]byte, r, ranks int) error {
	var own []string
	for _, n := range namesOf(files) {
		var k, of int
		owner := 0
		if _, err := fmt.Sscanf(n, "model-%05d-of-%05d.safetensors", &k, &of); err == nil && k >= 1 {
			owner = (k - 1) % ranks
		}
		if owner == r {
			own = append(own, n)
		}
	}
	w, err := s.NewPart(v, own...)
	if err != nil {
		return err
	}
	for _, n := range own {
		if err := w.AddFile(n, bytes.NewReader(files[n]), int64(len(files[n])), 0o644); err != nil {
			w.Abort()
			return err
		}
	}
	_, err = w.SealPart()
	return err
}

func openLocation(t *testing.T, where string, opts store.Options) *store.Store {
	t.Helper()
	if opts.CacheDir == "" {
		opts.CacheDir = t.TempDir()
	}
	opts.Logger = logtest.New(t.Logf)
	s, err := location.Open(where, location.Options{Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func fixClock(s *store.Store) {
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	store.SetClock(s, func() time.Time { clock = clock.Add(time.Minute); return clock })
}
