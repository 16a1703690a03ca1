package store

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestGCBesideReaderAndWriter runs gc over and over in the writer's process while the writer
// commits new versions and a read-only store (another process's view) reads every version it
// lists, from files opened before and after each gc. A read returns the version's exact
// bytes, or says the version is gone (ErrNoSuchVersion); never other bytes, never damage.
// Every version gc keeps reads back exact at the end, and the store verifies.
func TestGCBesideReaderAndWriter(t *testing.T) {
	versions := modelVersions(t, 12, 21)
	s, root := newStore(t, Options{})
	for i := range 4 {
		commitTree(t, s, uint64(i+1), versions[i])
	}
	r := openStore(t, root, Options{ReadOnly: true})

	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	// The reader: opens every file of every version it lists, reads it whole, twice (the
	// second time after the next Refresh, from the file it opened before).
	wg.Add(1)
	go func() {
		defer wg.Done()
		var held []struct {
			f    File
			want []byte
			what string
		}
		for !stop.Load() {
			if err := r.Refresh(); err != nil {
				report(fmt.Errorf("refresh: %w", err))
				return
			}
			for _, h := range held {
				checkRead(h.f, h.want, h.what+" (opened before a refresh)", report)
				h.f.Close()
			}
			held = held[:0]
			for _, info := range r.Versions() {
				v := info.Number
				for p, want := range versions[v-1] {
					f, err := r.OpenFile(v, p)
					if errors.Is(err, ErrNoSuchVersion) {
						continue
					}
					if err != nil {
						report(fmt.Errorf("open v%d %s: %w", v, p, err))
						continue
					}
					what := fmt.Sprintf("v%d %s", v, p)
					checkRead(f, want, what, report)
					held = append(held, struct {
						f    File
						want []byte
						what string
					}{f, want, what})
				}
			}
		}
		for _, h := range held {
			h.f.Close()
		}
	}()
	// gc, beside the writer's commits.
	wg.Add(1)
	gcs := 0
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if _, err := s.GC(2); err != nil {
				report(fmt.Errorf("gc: %w", err))
				return
			}
			gcs++
		}
	}()
	for i := 4; i < len(versions); i++ {
		if _, err := s.Commit(writeTree(t, t.TempDir(), versions[i]), CommitOptions{Version: uint64(i + 1)}); err != nil {
			report(fmt.Errorf("commit v%d: %w", i+1, err))
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d gc runs beside %d commits", gcs, len(versions)-4)
	if _, err := s.GC(2); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{s, r} {
		got := st.Versions()
		if len(got) != 2 || got[0].Number != 11 || got[1].Number != 12 {
			t.Fatalf("versions after gc: %v, want 11 and 12", got)
		}
		for _, info := range got {
			for p, want := range versions[info.Number-1] {
				mustEqualBytes(t, fmt.Sprintf("v%d %s at the end", info.Number, p), readWhole(t, st, info.Number, p), want)
			}
		}
	}
}

// checkRead reads f whole: its bytes must be want, or the read must say the version is gone.
func checkRead(f File, want []byte, what string, report func(error)) {
	b := make([]byte, f.Size())
	n, err := f.ReadAt(b, 0)
	switch {
	case n == len(want) && bytes.Equal(b, want):
	case err != nil && errors.Is(err, ErrNoSuchVersion) && !errors.Is(err, ErrCorrupt):
	case err != nil:
		report(fmt.Errorf("%s: read %d of %d bytes: %w", what, n, len(want), err))
	default:
		report(fmt.Errorf("%s: %d bytes read, not the version's", what, n))
	}
}

// A reader sees another store's gc re-anchor the kept versions' objects, rewrite their packs
// and consolidate the indexes: its Verify and its reads must see the store as it is now, not
// its map of the packs (TestGCBesideReaderAndWriter met this at random).
func TestReaderAfterGCElsewhere(t *testing.T) {
	versions := modelVersions(t, 5, 29)
	s, root := newStore(t, Options{})
	for i := range versions {
		commitTree(t, s, uint64(i+1), versions[i])
	}
	// The reader has loaded the indexes at open, and opened no pack yet (an open pack would
	// still read after gc deletes it).
	r := openStore(t, root, Options{ReadOnly: true})
	st, err := s.GC(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Dropped) != 3 {
		t.Fatalf("gc dropped versions %v, want 1, 2 and 3", st.Dropped)
	}
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	if rep, err := r.Verify(nil); err != nil {
		t.Fatalf("the reader's verify after gc elsewhere: %v (%d damaged)", err, len(rep.Damaged))
	}
	for v := uint64(4); v <= 5; v++ {
		for p, want := range versions[v-1] {
			mustEqualBytes(t, fmt.Sprintf("v%d %s after gc", v, p), readWhole(t, r, v, p), want)
		}
	}
}
