package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gpu"
)

// Figure 8: the diff kernel's throughput on one core against copy() of the same bytes, and the
// GPU (OpenCL) backend's if gpu.Select("gpu") finds one (PoCL, on a machine without a GPU).

const (
	kernelDensity = 0.02 // fraction of bf16 elements changed between the two buffers
	kernelPasses  = 5    // passes of each; the fastest is reported (the least disturbed)
	gpuPasses     = 2
)

// kernelInput builds two bf16 buffers of n bytes that differ in about density of their
// elements, each change one ULP up or down (as ~90% of RL changes are), at positions drawn
// independently. It returns the number of elements changed. The seed fixes the bytes.
func kernelInput(n int, density float64, seed uint64) (base, cur []byte, changed int) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	base = make([]byte, n&^1)
	for i := 0; i+8 <= len(base); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			base[i+k] = byte(v >> (8 * k))
		}
	}
	cur = slices.Clone(base)
	elements := len(base) / 2
	// Geometric gaps give independent Bernoulli(density) positions without a draw per element.
	for i := geometricGap(r, density); i < elements; i += 1 + geometricGap(r, density) {
		v := uint16(cur[2*i]) | uint16(cur[2*i+1])<<8
		if v&1 == 0 {
			v++
		} else {
			v--
		}
		cur[2*i], cur[2*i+1] = byte(v), byte(v>>8)
		changed++
	}
	return base, cur, changed
}

// geometricGap draws the number of unchanged elements before the next change.
// P(gap = k) = (1-p)^k p, by inversion of a uniform draw in (0, 1].
func geometricGap(r *rand.Rand, p float64) int {
	u := 1 - r.Float64()
	return int(math.Floor(math.Log(u) / math.Log1p(-p)))
}

// bestOf runs f passes times and returns the shortest duration and the first error.
func bestOf(passes int, f func() error) (time.Duration, error) {
	best := time.Duration(1<<63 - 1)
	for range passes {
		began := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		best = min(best, time.Since(began))
	}
	return best, nil
}

func gbPerSecond(n int, d time.Duration) float64 { return float64(n) / d.Seconds() / 1e9 }

func (b *bench) figKernel(ctx context.Context) ([]Row, error) {
	n := int(b.sz.KernelBytes)
	b.logf("kernel: %s of bf16, %.0f%% of elements changed", humanBytes(int64(n)), 100*kernelDensity)
	base, cur, changed := kernelInput(n, kernelDensity, 8)

	// copy() of the same bytes: the memory-bandwidth ceiling of one core.
	dst := make([]byte, len(cur))
	copyTime, _ := bestOf(kernelPasses, func() error { copy(dst, cur); return nil })

	cpu := delta.NewCPUDiff()
	var out delta.Changes
	out.Index = make([]uint32, 0, changed+changed/8)
	out.Values = make([]byte, 0, 2*cap(out.Index))
	cpuTime, err := bestOf(kernelPasses, func() error {
		out.Reset()
		return cpu.Diff(base, cur, 2, &out)
	})
	if err != nil {
		return nil, fmt.Errorf("cpu diff: %w", err)
	}
	if len(out.Index) != changed {
		return nil, fmt.Errorf("cpu diff found %d changed elements, %d were changed", len(out.Index), changed)
	}
	cpuRate, copyRate := gbPerSecond(len(cur), cpuTime), gbPerSecond(len(cur), copyTime)
	detail := map[string]any{"bytes": n, "changed_elements": changed, "passes": kernelPasses}
	rows := []Row{{
		Figure: "8", Name: "diff kernel, cpu, 1 core (2% changed bf16)", Measured: cpuRate, Unit: "GB/s",
		Baseline: copyRate, BaselineName: "copy()", Detail: detail,
		Note: "no goal in the issue: printed against copy() of the same bytes",
	}}
	if err := ctx.Err(); err != nil {
		return rows, err
	}
	rows = append(rows, b.gpuKernelRow(base, cur, &out, cpuRate))
	return rows, nil
}

// gpuKernelRow measures the OpenCL backend if gpu.Select("gpu") gives one, checking its output
// against the CPU's; otherwise the row is SKIP with the reason.
func (b *bench) gpuKernelRow(base, cur []byte, want *delta.Changes, cpuRate float64) Row {
	row := Row{Figure: "8", Name: "diff kernel, gpu backend (OpenCL)", Unit: "GB/s", BaselineName: "cpu diff", Baseline: cpuRate}
	backend, choice, err := gpu.Select(gpu.ModeGPU, nil)
	if err != nil {
		row.Status, row.Note = StatusSkip, "gpu.Select(\"gpu\"): "+err.Error()
		return row
	}
	defer gpu.CloseBackend(backend)
	var out delta.Changes
	t, err := bestOf(gpuPasses, func() error {
		out.Reset()
		return backend.Diff(base, cur, 2, &out)
	})
	if err != nil {
		row.Status, row.Note = StatusError, fmt.Sprintf("%s: %v", choice, err)
		return row
	}
	if !slices.Equal(out.Index, want.Index) || !bytes.Equal(out.Values, want.Values) {
		row.Status, row.Note = StatusError, fmt.Sprintf("%s: output differs from the CPU diff (%d vs %d changes)", choice.Device, len(out.Index), len(want.Index))
		return row
	}
	row.Measured = gbPerSecond(len(cur), t)
	row.Note = "OpenCL device " + choice.Device
	if choice.OnCPUDevice {
		row.Note = "an OpenCL CPU device (PoCL, all cores), not a GPU: there is none on this machine"
	}
	row.Detail = map[string]any{"device": choice.Device, "on_cpu_device": choice.OnCPUDevice, "passes": gpuPasses, "choice": choice.String()}
	return row
}
