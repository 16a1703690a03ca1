package delta

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"
)

// enospcAfter fails every WriteAt after the first left with ENOSPC (a disk that filled up
// mid-apply); the file keeps its Fd, so that the mapped paths are taken.
type enospcAfter struct {
	*fileTarget
	left int
}

func (f *enospcAfter) WriteAt(b []byte, off int64) (int, error) {
	if f.left <= 0 {
		return 0, syscall.ENOSPC
	}
	f.left--
	return f.fileTarget.WriteAt(b, off)
}

type enospcMemAfter struct {
	*memTarget
	left int
}

func (m *enospcMemAfter) WriteAt(b []byte, off int64) (int, error) {
	if m.left <= 0 {
		return 0, syscall.ENOSPC
	}
	m.left--
	return m.memTarget.WriteAt(b, off)
}

// TestApplyWriteFails: a write of an apply that fails (ENOSPC) after some writes succeeded,
// on every path that writes with WriteAt, returns that error (errors.Is ENOSPC), leaves the
// file marked or exactly one of the versions, and the same apply run again once the writes
// work finishes the job.
func TestApplyWriteFails(t *testing.T) {
	base, result, order := threeFileVersions(t)
	_, p := buildTestPatch(t, 43, 42, base, result, order)
	const name = "model.safetensors"
	for _, v := range applyVariants {
		if v.cfg.stores {
			continue // stores into the mapping: no write to fail
		}
		for _, left := range []int{0, 1, 2, 5} {
			t.Run(fmt.Sprintf("%s/after%d", v.name, left), func(t *testing.T) {
				target := v.open(t, base[name])
				var failing ApplyTarget
				switch tt := target.(type) {
				case *fileTarget:
					failing = &enospcAfter{tt, left}
				case *memTarget:
					failing = &enospcMemAfter{tt, left}
				default:
					t.Fatalf("target %T", target)
				}
				size := int64(len(base[name]))
				j := &memJournal{}
				cfg := v.cfg
				cfg.chunk = 5
				res, err := applyPatch(p, failing, size, name, j, cfg)
				if err == nil {
					t.Skipf("the apply needed at most %d writes (%d)", left, res.Writes)
				}
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("apply with a full disk = %v, want ENOSPC", err)
				}
				got := target.bytes(t)
				checkCrashState(t, got, string(got[:8]) == applyMarker, base[name], result[name])
				if _, err := applyPatch(p, target, size, name, j, cfg); err != nil {
					t.Fatalf("re-run: %v", err)
				}
				if !bytes.Equal(target.bytes(t), result[name]) || j.ok {
					t.Fatal("re-run did not finish the apply")
				}
			})
		}
	}
}
