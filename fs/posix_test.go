package fs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// TestOpenVersionMatchesLocalDir applies the same random sequence of POSIX operations to an
// open version and to a directory on the local disk (the reference), compares the two trees
// as it goes, seals, and compares the stored version with the reference.
func TestOpenVersionMatchesLocalDir(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	ref := t.TempDir()
	ver := filepath.Join(mnt, "weight_v000001")
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	names := []string{"a", "b", "c", "d/e", "d/f", "g/h/i"}
	dirs := []string{"d", "g", "g/h", "x"}
	apply := func(op func(root string) error) (refErr, verErr error) {
		return op(ref), op(ver)
	}
	succeeded := 0
	for step := 0; step < 400; step++ {
		name := names[rng.IntN(len(names))]
		var desc string
		var op func(root string) error
		switch k := rng.IntN(9); k {
		case 0, 1, 2: // write at a random offset (creating the file if needed)
			off := rng.Int64N(200000)
			data := pattern(step, 1+rng.IntN(70000))
			desc = fmt.Sprintf("write %s at %d+%d", name, off, len(data))
			op = func(root string) error {
				f, err := os.OpenFile(filepath.Join(root, name), os.O_RDWR|os.O_CREATE, 0o644)
				if err != nil {
					return err
				}
				_, werr := f.WriteAt(data, off)
				return firstErr(werr, f.Close())
			}
		case 3:
			size := rng.Int64N(300000)
			desc = fmt.Sprintf("truncate %s to %d", name, size)
			op = func(root string) error { return os.Truncate(filepath.Join(root, name), size) }
		case 4:
			to := names[rng.IntN(len(names))]
			desc = fmt.Sprintf("rename %s to %s", name, to)
			op = func(root string) error { return os.Rename(filepath.Join(root, name), filepath.Join(root, to)) }
		case 5:
			desc = "unlink " + name
			op = func(root string) error { return os.Remove(filepath.Join(root, name)) }
		case 6:
			d := dirs[rng.IntN(len(dirs))]
			desc = "mkdir " + d
			op = func(root string) error { return os.Mkdir(filepath.Join(root, d), 0o750) }
		case 7:
			d := dirs[rng.IntN(len(dirs))]
			desc = "rmdir " + d
			op = func(root string) error { return syscall.Rmdir(filepath.Join(root, d)) }
		case 8:
			mode := os.FileMode(0o600 + rng.IntN(0o100))
			desc = fmt.Sprintf("chmod %s %o", name, mode)
			op = func(root string) error { return os.Chmod(filepath.Join(root, name), mode) }
		}
		refErr, verErr := apply(op)
		if errnoOf(refErr) != errnoOf(verErr) {
			t.Fatalf("step %d: %s: reference %v, mount %v", step, desc, refErr, verErr)
		}
		if refErr == nil {
			succeeded++
		}
		if step%50 == 0 {
			sameTree(t, fmt.Sprintf("step %d", step), treeOf(t, ver), treeOf(t, ref))
		}
	}
	// The sequence must mostly do things, not only fail the same way on both sides.
	if succeeded < 200 {
		t.Fatalf("only %d of 400 operations succeeded", succeeded)
	}
	sameTree(t, "before the seal", treeOf(t, ver), treeOf(t, ref))
	want := treeOf(t, ref)
	mustSeal(t, ver)
	got := map[string]string{}
	entries, _ := b.Entries(1)
	for _, e := range entries {
		if e.Dir {
			got[e.Path+"/"] = fmt.Sprintf("%o", e.Mode.Perm())
			continue
		}
		data, _ := b.file(1, e.Path)
		got[e.Path] = fmt.Sprintf("%o:%s", e.Mode.Perm(), data)
	}
	sameTree(t, "stored version", got, want)
	sameTree(t, "sealed version on the mount", treeOf(t, ver), want)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if pe, ok := err.(*os.PathError); ok {
		err = pe.Err
	} else if le, ok := err.(*os.LinkError); ok {
		err = le.Err
	}
	errno, _ = err.(syscall.Errno)
	if errno == 0 {
		return syscall.Errno(^uint(0) >> 1)
	}
	return errno
}

func TestConcurrentWritersOneVersion(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	ver := filepath.Join(mnt, "weight_v000001")
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	const shards = 4
	var wg sync.WaitGroup
	errs := make(chan error, shards)
	for i := 0; i < shards; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			data := pattern(100+i, 2<<20+i)
			f, err := os.Create(filepath.Join(ver, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, shards)))
			if err != nil {
				errs <- err
				return
			}
			for off := 0; off < len(data); off += 128 << 10 {
				end := min(off+128<<10, len(data))
				if _, err := f.WriteAt(data[off:end], int64(off)); err != nil {
					errs <- err
					return
				}
			}
			errs <- f.Close()
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	mustSeal(t, ver)
	for i := 0; i < shards; i++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, shards)
		got, err := os.ReadFile(filepath.Join(ver, name))
		if err != nil || !bytes.Equal(got, pattern(100+i, 2<<20+i)) {
			t.Errorf("%s: %d bytes, %v", name, len(got), err)
		}
	}
}

func TestUnlinkedOpenFileStaysReadable(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	ver := filepath.Join(mnt, "weight_v000001")
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(ver, "tmp")
	writeFile(t, p, []byte("still here"))
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if string(buf[:n]) != "still here" {
		t.Fatalf("read of the unlinked file: %q, %v", buf[:n], err)
	}
	writeFile(t, filepath.Join(ver, "kept"), []byte("k"))
	mustSeal(t, ver)
	if _, ok := b.file(1, "tmp"); ok {
		t.Error("the unlinked file was stored")
	}
	if got := listDir(t, ver); got != "kept" {
		t.Errorf("sealed version lists %q", got)
	}
}

func TestRmdirDropsOpenVersion(t *testing.T) {
	b := newFakeStore()
	mnt, _ := mountTest(t, b, Options{})
	ver := filepath.Join(mnt, "weight_v000003")
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ver, "sub/f"), []byte("x"))
	wantErrno(t, "rmdir of a non-empty open version", syscall.Rmdir(ver), syscall.ENOTEMPTY)
	if err := os.RemoveAll(ver); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	aborted := append([]uint64(nil), b.aborted...)
	b.mu.Unlock()
	if len(aborted) != 1 || aborted[0] != 3 {
		t.Errorf("aborted writers: %v, want [3]", aborted)
	}
	// The number is free again.
	if err := os.Mkdir(ver, 0o755); err != nil {
		t.Errorf("mkdir after rmdir: %v", err)
	}
}
