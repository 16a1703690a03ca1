package store

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
)

// faultBackend is the local backend with reads of chosen objects failing with an errno: the
// first n reads (n < 0: every read) of each, as a file system that returns EIO (or EMFILE,
// EACCES) for a file whose bytes are intact.
type faultBackend struct {
	*localBackend
	mu    sync.Mutex
	fails map[ID]int
	errno syscall.Errno
}

func (b *faultBackend) OpenObject(id ID) (ObjectFile, error) {
	f, err := b.localBackend.OpenObject(id)
	if err != nil {
		return f, err
	}
	return &faultFile{ObjectFile: f, b: b, id: id}, nil
}

type faultFile struct {
	ObjectFile
	b  *faultBackend
	id ID
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	f.b.mu.Lock()
	n, ok := f.b.fails[f.id]
	if ok && n != 0 {
		if n > 0 {
			f.b.fails[f.id] = n - 1
		}
		f.b.mu.Unlock()
		return 0, &os.PathError{Op: "read", Path: f.id.String(), Err: f.b.errno}
	}
	f.b.mu.Unlock()
	return f.ObjectFile.ReadAt(p, off)
}

// readsExactly reports whether every file of version v reads back as files says, through
// the store's read path (the materialized copy, the file copies, the objects).
func readsExactly(s *Store, v uint64, files map[string][]byte) bool {
	for p, want := range files {
		f, err := s.OpenFile(v, p)
		if err != nil {
			return false
		}
		got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
		f.Close()
		if err != nil || !bytes.Equal(got, want) {
			return false
		}
	}
	return true
}

// deltaObjectOf returns the object of tensor w of model.safetensors of version v, which must
// be a delta object.
func deltaObjectOf(t *testing.T, s *Store, v uint64) ID {
	t.Helper()
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	id := ver.files["model.safetensors"].Tensors[0].ID
	if m, err := s.objects.meta(id); err != nil || m.Kind != kindDelta {
		t.Fatalf("tensor of version %d: object %s is not a delta object (%v)", v, id, err)
	}
	return id
}

// One damaged small delta object of version 3 (a flipped byte, or a file system that returns
// EIO for it) used to move versions 3-6 and three sound objects into quarantine, and latest
// dropped from 6 to 2, although the materialized copy of 6 was exact. The rule: repair never
// moves a version that every read path serves exactly; latest never drops below a version
// that reads exactly; an I/O error is no verdict of damage.
func TestRepairMovesOnlyWhatIsDamaged(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flip  bool          // flip a byte of the object
		errno syscall.Errno // or fail its reads with this
		fails int           // this many times (< 0: always)
		// ioError: Repair must stop with an error of the check (not ErrCorrupt) and move
		// nothing.
		ioError bool
		// copied: version 3's model file is read (and so copied, checked) before the
		// damage: Repair mends the object from that copy and moves nothing.
		copied bool
		// latest: the damaged object is version 6's, which the materialized copy holds:
		// Repair mends it from the copy and moves nothing.
		latest bool
	}{
		{name: "flipped byte", flip: true},
		{name: "flipped byte of the latest version", flip: true, latest: true},
		{name: "flipped byte, version 3 copied", flip: true, copied: true},
		{name: "EIO once", errno: syscall.EIO, fails: 1},
		{name: "EIO always", errno: syscall.EIO, fails: -1, ioError: true},
		{name: "EMFILE always", errno: syscall.EMFILE, fails: -1, ioError: true},
		{name: "EACCES always", errno: syscall.EACCES, fails: -1, ioError: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, root := newLooseStore(t, Options{})
			want := map[uint64]map[string][]byte{}
			n := 4096
			if tc.copied {
				n = 1 << 20 // a file copy is kept of files of a page or more
			}
			for step := byte(1); step <= 6; step++ {
				want[uint64(step)] = map[string][]byte{
					"model.safetensors": safetensorsFile(t, bf16Tensor("w", n, step)),
					"step.txt":          {'0' + step},
				}
				commitTree(t, s, 0, want[uint64(step)])
			}
			bad := deltaObjectOf(t, s, 3)
			if tc.latest {
				bad = deltaObjectOf(t, s, 6)
			}
			if tc.copied {
				// The pass that copies a file of version 3 (filecopy.go) hashes it and keeps the
				// checked copy.
				ver, err := s.versions.sealedVersion(3)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := s.passFile(ver, ver.files["model.safetensors"], nil); err != nil || got != ver.files["model.safetensors"].SHA256 {
					t.Fatalf("pass over version 3: %v", err)
				}
				if _, n := s.FileCopyUsage(); n == 0 {
					t.Fatal("no file copy of version 3")
				}
			}
			if tc.flip {
				flipByte(t, s.be.given.(*localBackend).ObjectPath(bad))
				expectDamage(s)
			}
			fb := &faultBackend{localBackend: s.be.given.(*localBackend), fails: map[ID]int{}, errno: tc.errno}
			s.be.Backend = fb
			t.Cleanup(func() { s.be.Backend = fb.localBackend })
			s.objects.objInfos.clear()
			s.objects.deltas.clear()
			s.objects.crcChecked.clear()
			s.objects.pages.clear()

			exact := map[uint64]bool{}
			for v := uint64(1); v <= 6; v++ {
				exact[v] = readsExactly(s, v, want[v])
			}
			if !exact[6] {
				t.Fatalf("version 6 does not read exactly before the repair: the test needs its copy intact")
			}
			if tc.errno != 0 {
				// Armed after the reads above: the bytes are intact, the file system fails.
				fb.mu.Lock()
				fb.fails[bad] = tc.fails
				fb.mu.Unlock()
			}
			// The dry run says what the repair will do, and changes nothing.
			dry, derr := s.RepairWith(RepairOptions{DryRun: true})
			if got := versionNumbers(s.Versions()); len(got) != 6 {
				t.Fatalf("versions %v after the dry run", got)
			}
			rep, err := s.RepairWith(RepairOptions{})
			if (derr == nil) != (err == nil) || !sameNumbers(dry.Quarantined, rep.Quarantined) || !slices.Equal(dry.QuarantinedObjects, rep.QuarantinedObjects) ||
				!slices.Equal(append(dry.Mended, dry.Reanchored...), append(rep.Mended, rep.Reanchored...)) || !dry.DryRun {
				t.Errorf("the dry run said: versions %v, objects %v, mended %v, re-anchored %v (err %v); the repair did: %v, %v, %v, %v (err %v)",
					dry.Quarantined, dry.QuarantinedObjects, dry.Mended, dry.Reanchored, derr, rep.Quarantined, rep.QuarantinedObjects, rep.Mended, rep.Reanchored, err)
			}
			for _, d := range rep.Verify.Damaged {
				t.Logf("verify: DAMAGED %s", d)
			}
			t.Logf("repair: quarantined %v, objects %v, mended %v, re-anchored %v, err %v", rep.Quarantined, rep.QuarantinedObjects, rep.Mended, rep.Reanchored, err)
			if tc.ioError {
				if err == nil || errors.Is(err, ErrCorrupt) {
					t.Fatalf("repair with %v reading object %s: %v, want an error of the check, not damage", tc.errno, bad, err)
				}
				if !errors.Is(err, tc.errno) {
					t.Errorf("repair's error does not name %v: %v", tc.errno, err)
				}
				for _, d := range rep.Verify.Damaged {
					t.Errorf("verify calls an I/O error damage: %s", d)
				}
				if len(rep.Verify.Unreadable) == 0 {
					t.Errorf("verify does not report the object it could not read")
				}
				if len(rep.Moved) != 0 {
					t.Fatalf("repair moved %v after an I/O error", rep.Moved)
				}
			} else if err != nil {
				t.Fatalf("repair: %v", err)
			}
			damagedOnPurpose.Delete(s) // (mended or moved: closeStore verifies)
			if (tc.copied || tc.latest) && (len(rep.Mended) != 1 || rep.Mended[0] != bad || len(rep.Moved) != 0) {
				t.Errorf("repair with a checked copy of the damaged object's content: mended %v, moved %v; want %s mended and nothing moved", rep.Mended, rep.Moved, bad)
			}
			if v, ok := s.Latest(); !ok || v != 6 {
				t.Errorf("latest %d after the repair, want 6", v)
			}
			for v := uint64(1); v <= 6; v++ {
				if !exact[v] {
					continue
				}
				if slices.Contains(rep.Quarantined, v) {
					t.Errorf("version %d read exactly and was quarantined", v)
				}
				if !tc.ioError && !readsExactly(s, v, want[v]) {
					t.Errorf("version %d read exactly before the repair, not after", v)
				}
			}
			for _, id := range rep.QuarantinedObjects {
				if id != bad {
					t.Errorf("sound object %s quarantined", id)
				}
			}
			if tc.ioError {
				// Nothing moved: once the file system reads again, every version does.
				fb.mu.Lock()
				clear(fb.fails)
				fb.mu.Unlock()
				s.objects.objInfos.clear()
				s.objects.deltas.clear()
				s.objects.crcChecked.clear()
				s.objects.pages.clear()
				for v := uint64(1); v <= 6; v++ {
					if !readsExactly(s, v, want[v]) {
						t.Errorf("version %d does not read exactly after the I/O errors", v)
					}
				}
				return
			}
			// The store is consistent afterwards, and a fresh process reads the same.
			if _, err := s.Verify(nil); err != nil {
				t.Fatalf("verify after the repair: %v", err)
			}
			closeStore(t, s)
			r := openLoose(t, root, Options{ReadOnly: true})
			for _, info := range r.Versions() {
				if !readsExactly(r, info.Number, want[info.Number]) {
					t.Errorf("a fresh reader: version %d listed and not read exactly", info.Number)
				}
			}
			if v, ok := r.Latest(); !ok || v != 6 {
				t.Errorf("a fresh reader: latest %d, want 6", v)
			}
		})
	}
}
