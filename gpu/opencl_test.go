//go:build cgo

package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// testChunk is the chunk size of the shared test backend: one tile, so that inputs of a few
// tens of KiB already stream through both buffer sets several times.
const testChunk = tileBytes

// openCLForTest returns a backend on the machine's first usable OpenCL device (PoCL here),
// shared by the tests of this process, or skips the test saying what is missing.
func openCLForTest(t testing.TB) *OpenCLBackend {
	t.Helper()
	shared.once.Do(func() {
		lib, err := loadOpenCL(DefaultOpenCLLibrary)
		if err != nil {
			shared.skip = fmt.Sprintf("OpenCL not installed (install ocl-icd-libopencl1 and pocl-opencl-icd to run this test): %v", err)
			return
		}
		inv := discoverOpenCL(lib)
		plan, err := planDevice(ModeGPU, Inventory{Reason: "NVML not consulted by this test"}, inv, DeviceMemoryNeeded(testChunk), 0)
		if err != nil {
			shared.skip = fmt.Sprintf("no usable OpenCL device (install pocl-opencl-icd to run this test): %v", err)
			return
		}
		shared.backend, shared.err = newOpenCLBackend(lib, plan.device, testChunk)
	})
	if shared.skip != "" {
		t.Skip(shared.skip)
	}
	if shared.err != nil {
		t.Fatalf("start the OpenCL backend: %v", shared.err)
	}
	return shared.backend
}

var shared struct { // test fixture only: building the kernel on PoCL takes a second
	once    sync.Once
	backend *OpenCLBackend
	err     error
	skip    string
}

// diffCase is one differential input: base and a cur derived from it.
type diffCase struct {
	name string
	size int // bytes, a multiple of every width tested
	make func(base []byte, r *rand.Rand) []byte
}

func sparseChange(fraction float64) func([]byte, *rand.Rand) []byte {
	return func(base []byte, r *rand.Rand) []byte {
		cur := bytes.Clone(base)
		for i := range cur {
			if r.Float64() < fraction {
				cur[i] ^= byte(r.IntN(255) + 1)
			}
		}
		return cur
	}
}

func diffCases() []diffCase {
	unchanged := func(base []byte, _ *rand.Rand) []byte { return bytes.Clone(base) }
	everything := func(base []byte, _ *rand.Rand) []byte {
		cur := bytes.Clone(base)
		for i := range cur {
			cur[i] = ^cur[i]
		}
		return cur
	}
	ends := func(base []byte, _ *rand.Rand) []byte {
		cur := bytes.Clone(base)
		cur[0] ^= 1
		cur[len(cur)-1] ^= 0x80
		return cur
	}
	return []diffCase{
		{"empty", 0, unchanged},
		{"one element unchanged", 8, unchanged},
		{"one element changed", 8, everything},
		{"nothing changed", 3*testChunk + 24, unchanged},
		{"everything changed", 3*testChunk + 24, everything},
		{"first and last bytes", 5*testChunk + 8, ends},
		{"unaligned tail 8", 1000*8 + 8, sparseChange(0.05)},
		{"unaligned tail 24", testChunk + 24, sparseChange(0.05)},
		{"tail shorter than a block", 2*testChunk + 8, ends},
		{"sparse 2% several chunks", 9*testChunk + 40, sparseChange(0.02)},
		{"dense 50%", 4*testChunk + 16, sparseChange(0.5)},
		{"large 1 MiB sparse", 1 << 20, sparseChange(0.01)},
	}
}

// TestOpenCLMatchesCPU is the differential test: for every width and case, the OpenCL
// backend's output equals the CPU backend's, the reference's and the kernel model's, byte for
// byte.
func TestOpenCLMatchesCPU(t *testing.T) {
	b := openCLForTest(t)
	cpu := delta.NewCPUDiff()
	for _, tc := range diffCases() {
		for _, w := range []int{1, 2, 4, 8} {
			t.Run(fmt.Sprintf("%s/width%d", tc.name, w), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(tc.size), uint64(w)))
				base := make([]byte, tc.size)
				for i := range base {
					base[i] = byte(r.Uint32())
				}
				cur := tc.make(base, r)
				var got, want, model delta.Changes
				if err := b.Diff(base, cur, w, &got); err != nil {
					t.Fatalf("opencl: %v", err)
				}
				if err := cpu.Diff(base, cur, w, &want); err != nil {
					t.Fatalf("cpu: %v", err)
				}
				if err := modelDiff(base, cur, w, testChunk, &model); err != nil {
					t.Fatalf("model: %v", err)
				}
				assertSameChanges(t, "opencl vs cpu", got, want)
				assertSameChanges(t, "model vs cpu", model, want)
			})
		}
	}
}

func assertSameChanges(t *testing.T, what string, got, want delta.Changes) {
	t.Helper()
	if !slices.Equal(got.Index, want.Index) {
		t.Fatalf("%s: %d indices vs %d; first mismatch %s", what, len(got.Index), len(want.Index), firstMismatch(got.Index, want.Index))
	}
	if !bytes.Equal(got.Values, want.Values) {
		t.Fatalf("%s: values differ (%d vs %d bytes)", what, len(got.Values), len(want.Values))
	}
}

func firstMismatch(a, b []uint32) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("at %d: %d vs %d", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("at %d (one is a prefix of the other)", min(len(a), len(b)))
}

// TestOpenCLAppends checks that Diff appends after what out already holds, as the contract
// says, and that a failed call leaves out as it was.
func TestOpenCLAppends(t *testing.T) {
	b := openCLForTest(t)
	base := make([]byte, 3*testChunk)
	cur := bytes.Clone(base)
	cur[10], cur[2*testChunk+3] = 1, 2
	out := delta.Changes{Index: []uint32{7}, Values: []byte{0xAA}}
	if err := b.Diff(base, cur, 1, &out); err != nil {
		t.Fatal(err)
	}
	want := delta.Changes{Index: []uint32{7, 10, 2*testChunk + 3}, Values: []byte{0xAA, 1, 2}}
	assertSameChanges(t, "append", out, want)
	if err := b.Diff(base, cur[:len(cur)-1], 1, &out); !errors.Is(err, delta.ErrInvalidArgument) {
		t.Fatalf("unequal lengths: err = %v, want ErrInvalidArgument", err)
	}
	assertSameChanges(t, "after a failed call", out, want)
}

func TestOpenCLRejectsBadArguments(t *testing.T) {
	b := openCLForTest(t)
	var out delta.Changes
	for _, tc := range []struct {
		name      string
		base, cur []byte
		width     int
	}{
		{"width 3", make([]byte, 6), make([]byte, 6), 3},
		{"width 0", nil, nil, 0},
		{"unequal", make([]byte, 8), make([]byte, 16), 8},
		{"not whole elements", make([]byte, 6), make([]byte, 6), 4},
	} {
		if err := b.Diff(tc.base, tc.cur, tc.width, &out); !errors.Is(err, delta.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", tc.name, err)
		}
		// The CPU backend refuses the same calls.
		if err := delta.NewCPUDiff().Diff(tc.base, tc.cur, tc.width, &out); !errors.Is(err, delta.ErrInvalidArgument) {
			t.Errorf("%s: cpu err = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if err := b.Diff(nil, nil, 2, nil); !errors.Is(err, delta.ErrInvalidArgument) {
		t.Errorf("nil out: err = %v", err)
	}
	if len(out.Index) != 0 || len(out.Values) != 0 {
		t.Errorf("failed calls wrote %d indices", len(out.Index))
	}
}

// TestOpenCLConcurrent runs Diff from several goroutines on one backend: calls are serialised
// and each gets its own, correct, output.
func TestOpenCLConcurrent(t *testing.T) {
	b := openCLForTest(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 99))
			base := make([]byte, 4*testChunk+16)
			for i := range base {
				base[i] = byte(r.Uint32())
			}
			cur := sparseChange(0.03)(base, r)
			var got, want delta.Changes
			if err := b.Diff(base, cur, 2, &got); err != nil {
				errs <- err
				return
			}
			_ = delta.ReferenceDiff(base, cur, 2, &want)
			if !slices.Equal(got.Index, want.Index) || !bytes.Equal(got.Values, want.Values) {
				errs <- fmt.Errorf("goroutine %d: output differs from the reference", g)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestOpenCLSelfTestPasses(t *testing.T) {
	b := openCLForTest(t)
	if err := selfTest(b, delta.NewCPUDiff()); err != nil {
		t.Fatal(err)
	}
}

// brokenCPU flips the last value byte: the self-test must notice.
type brokenCPU struct{ delta.DiffBackend }

func (b brokenCPU) Diff(base, cur []byte, w int, out *delta.Changes) error {
	if err := b.DiffBackend.Diff(base, cur, w, out); err != nil {
		return err
	}
	if len(out.Values) > 0 {
		out.Values[len(out.Values)-1] ^= 1
	}
	return nil
}

func TestOpenCLSelfTestCatchesMismatch(t *testing.T) {
	b := openCLForTest(t)
	err := selfTest(b, brokenCPU{delta.NewCPUDiff()})
	if !errors.Is(err, ErrSelfTest) {
		t.Fatalf("err = %v, want ErrSelfTest", err)
	}
}
