//go:build cgo

package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/weightfs/weightfs/delta"
)

// logLines collects Logf output.
type logLines []string

func (l *logLines) logf(format string, args ...any) { *l = append(*l, fmt.Sprintf(format, args...)) }

// TestSelectWithoutGPULibraries simulates a machine with neither NVML nor OpenCL.
func TestSelectWithoutGPULibraries(t *testing.T) {
	opts := Options{NVMLLibrary: missingNVML, OpenCLLibrary: missingOpenCL}
	var log logLines
	opts.Logf = log.logf
	for _, mode := range []string{"", "auto", "AUTO"} {
		opts.Mode = mode
		b, c, err := SelectWith(opts)
		if err != nil {
			t.Fatalf("mode %q: %v", mode, err)
		}
		if b.Name() != "cpu" || c.Backend != BackendCPU || c.Device != "" {
			t.Fatalf("mode %q: backend %s, choice %+v", mode, b.Name(), c)
		}
		if !errors.Is(c.Err, ErrNoGPU) || !strings.Contains(c.Reason, "NVML library "+missingNVML+" not found") {
			t.Errorf("mode %q: reason %q, err %v", mode, c.Reason, c.Err)
		}
	}
	if len(log) == 0 {
		t.Error("Logf was not called")
	}

	opts.Mode = ModeGPU
	b, _, err := SelectWith(opts)
	if b != nil || !errors.Is(err, ErrNoGPU) || !errors.Is(err, ErrNoOpenCL) || !strings.Contains(err.Error(), missingOpenCL) {
		t.Fatalf("gpu mode: backend %v, err %v; want ErrNoGPU and ErrNoOpenCL naming %s", b, err, missingOpenCL)
	}
}

func TestSelectModes(t *testing.T) {
	if _, _, err := Select("fast", nil); !errors.Is(err, ErrBadMode) {
		t.Errorf("mode fast: err = %v", err)
	}
	b, c, err := Select("cpu", nil)
	if err != nil || b.Name() != "cpu" || c.Backend != BackendCPU || c.Err != nil {
		t.Errorf("cpu mode: %v %+v %v", b, c, err)
	}
	if err := CloseBackend(b); err != nil {
		t.Errorf("close the CPU backend: %v", err)
	}
}

// TestSelectNVIDIAWithoutOpenCL: NVML sees GPUs but OpenCL is missing.
func TestSelectNVIDIAWithoutOpenCL(t *testing.T) {
	free := [8]uint64{10 << 30, 20 << 30, 30 << 30, 40 << 30, 50 << 30, 60 << 30, 70 << 30, 75 << 30}
	opts := Options{NVML: newMockNVML(dgxH100(free), nvml.SUCCESS), OpenCLLibrary: missingOpenCL}
	b, c, err := SelectWith(opts)
	if err != nil || b.Name() != "cpu" || !errors.Is(c.Err, ErrNoOpenCL) {
		t.Fatalf("auto: %v %+v %v", b, c, err)
	}
	if !strings.Contains(c.Reason, "GPU 7 (NVIDIA H100 80GB HBM3, PCI 0000:db:00.0, 75.0 GiB free") {
		t.Errorf("reason %q does not name the GPU with the most free memory", c.Reason)
	}
	opts.Mode = ModeGPU
	if _, _, err := SelectWith(opts); !errors.Is(err, ErrNoOpenCL) {
		t.Errorf("gpu mode: err = %v, want ErrNoOpenCL", err)
	}
}

// TestSelectNVIDIANotInOpenCL: NVML sees GPUs, OpenCL (PoCL here) has no device at their PCI
// address; and a GPU without room. Needs OpenCL to be installed.
func TestSelectNVIDIANotInOpenCL(t *testing.T) {
	openCLForTest(t)
	free := [8]uint64{10 << 30, 20 << 30, 30 << 30, 40 << 30, 50 << 30, 60 << 30, 70 << 30, 75 << 30}
	for _, tc := range []struct {
		name string
		free [8]uint64
		want error
	}{
		{"no OpenCL device at the GPU's address", free, ErrNoDevice},
		{"no room", [8]uint64{1 << 20}, ErrNoRoom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{NVML: newMockNVML(dgxH100(tc.free), nvml.SUCCESS)}
			b, c, err := SelectWith(opts)
			if err != nil || b.Name() != "cpu" || !errors.Is(c.Err, tc.want) {
				t.Fatalf("auto: %v %+v %v", b, c, err)
			}
			opts.Mode = ModeGPU
			if _, _, err := SelectWith(opts); !errors.Is(err, tc.want) {
				t.Errorf("gpu mode: err = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestSelectGPUModeOnPoCL: without an NVIDIA GPU, gpu mode runs the kernel on an OpenCL CPU
// device, says so, passes the self-test with the default chunk size, and diffs correctly.
func TestSelectGPUModeOnPoCL(t *testing.T) {
	openCLForTest(t)
	b, c, err := SelectWith(Options{Mode: ModeGPU, NVMLLibrary: missingNVML})
	if err != nil {
		t.Fatal(err)
	}
	defer CloseBackend(b)
	if c.Backend != BackendGPU || c.Device == "" || c.Err != nil {
		t.Fatalf("choice %+v", c)
	}
	ob, ok := b.(*OpenCLBackend)
	if !ok || ob.ChunkBytes() != DefaultChunkBytes {
		t.Fatalf("backend %T", b)
	}
	if ob.Device().IsGPU() != !c.OnCPUDevice {
		t.Errorf("OnCPUDevice %v for a %s device", c.OnCPUDevice, ob.Device().Type)
	}
	if c.OnCPUDevice && !strings.Contains(c.Reason, "a CPU, not a GPU") {
		t.Errorf("reason %q hides that the device is a CPU", c.Reason)
	}
	base, cur := selfTestInput(3*DefaultChunkBytes + 24)
	if err := compareBackends(b, delta.NewCPUDiff(), base, cur, 2); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.Name(), "opencl (") {
		t.Errorf("name %q", b.Name())
	}
}

func TestOpenCLClose(t *testing.T) {
	fixture := openCLForTest(t)
	b, err := newOpenCLBackend(fixture.lib, fixture.device, testChunk)
	if err != nil {
		t.Fatal(err)
	}
	if err := CloseBackend(b); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	var out delta.Changes
	if err := b.Diff(make([]byte, 8), make([]byte, 8), 1, &out); !errors.Is(err, ErrClosed) {
		t.Fatalf("Diff after Close: err = %v", err)
	}
}

func TestDeviceMemoryNeeded(t *testing.T) {
	for _, tc := range []struct {
		chunk     int
		wantChunk int
		want      uint64
	}{
		{0, DefaultChunkBytes, 2 * (7*DefaultChunkBytes + 4*256 + 4*257)},
		{tileBytes, tileBytes, 2 * (7*tileBytes + 4 + 8)},
		{1, tileBytes, 2 * (7*tileBytes + 4 + 8)},
		{tileBytes + 100, tileBytes, 2 * (7*tileBytes + 4 + 8)},
		{4 << 30, maxChunkBytes, 2 * (7*maxChunkBytes + 4*(maxChunkBytes/tileBytes) + 4*(maxChunkBytes/tileBytes+1))},
	} {
		if got := normalizeChunk(tc.chunk); got != tc.wantChunk {
			t.Errorf("normalizeChunk(%d) = %d, want %d", tc.chunk, got, tc.wantChunk)
		}
		if got := DeviceMemoryNeeded(tc.chunk); got != tc.want {
			t.Errorf("DeviceMemoryNeeded(%d) = %d, want %d", tc.chunk, got, tc.want)
		}
	}
}

func TestReportWithoutGPULibraries(t *testing.T) {
	r := DiscoverWith(Options{NVMLLibrary: missingNVML, OpenCLLibrary: missingOpenCL})
	s := r.String()
	for _, want := range []string{
		"NVML (" + missingNVML + "): NVML library " + missingNVML + " not found: no NVIDIA driver on this machine\n",
		"OpenCL (" + missingOpenCL + "): " + ErrNoOpenCL.Error(),
		"GPU diff buffers: 2 x 2.0 MiB chunks, 28.0 MiB of device memory\n",
		"--diff auto runs cpu: GPU diff not used: no NVIDIA GPU",
		"--diff gpu fails: no NVIDIA GPU",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	var buf bytes.Buffer
	n, err := r.WriteTo(&buf)
	if err != nil || n != int64(len(s)) || buf.String() != s {
		t.Errorf("WriteTo wrote %d bytes, err %v", n, err)
	}
}

func TestReportDGXH100(t *testing.T) {
	free := [8]uint64{10 << 30, 20 << 30, 30 << 30, 40 << 30, 50 << 30, 60 << 30, 79 << 30, 75 << 30}
	r := DiscoverWith(Options{NVML: newMockNVML(dgxH100(free), nvml.SUCCESS), OpenCLLibrary: missingOpenCL})
	if len(r.NVML.GPUs) != 8 || r.Auto.Backend != BackendCPU || !errors.Is(r.Auto.Err, ErrNoOpenCL) {
		t.Fatalf("report %+v", r)
	}
	s := r.String()
	for _, want := range []string{
		"NVML (NVML (injected)): 8 GPUs, driver 550.54.15, NVML 12.550.54.15\n",
		"  GPU 6  NVIDIA H100 80GB HBM3  PCI 0000:ba:00.0  memory 79.0 GiB free of 80.0 GiB  utilisation 60% (memory 30%)  GPU-mock-6\n",
		"--diff auto runs cpu: GPU diff not used: OpenCL not available: GPU 6 (NVIDIA H100 80GB HBM3, PCI 0000:ba:00.0",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}
