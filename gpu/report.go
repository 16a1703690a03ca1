package gpu

import (
	"fmt"
	"io"
	"strings"
)

// Report is what `weightfs gpus` prints: the GPUs NVML found, the OpenCL devices, and which
// diff backend each mode would run, with the reason.
type Report struct {
	NVML         Inventory
	OpenCL       OpenCLInventory
	ChunkBytes   int    // the OpenCL backend's chunk size
	MemoryNeeded uint64 // device memory for its buffers
	// Auto is what --diff auto runs. On a machine with an NVIDIA GPU, producing it built the
	// kernel and ran the self-test.
	Auto Choice
	// GPUMode is what --diff gpu would run, or why it would fail. It is planned from the
	// inventories only; the kernel is not built for it.
	GPUMode string
}

// Discover is what `weightfs gpus` prints, with the production defaults: see DiscoverWith.
func Discover() Report { return DiscoverWith(Options{}) }

// DiscoverWith discovers NVML and OpenCL (always loading OpenCL, unlike an auto Select, so the
// report lists its devices) and decides as Select would. It does not fail; problems are in the
// report. opts.Mode is ignored.
func DiscoverWith(opts Options) Report {
	env := discover(opts, true)
	chunk := normalizeChunk(opts.ChunkBytes)
	r := Report{NVML: env.nvml, OpenCL: env.opencl, ChunkBytes: chunk, MemoryNeeded: DeviceMemoryNeeded(chunk)}
	if !gpuSupport {
		r.Auto, r.GPUMode = noGPUSupportChoice(), "fails: "+ErrNoGPUSupport.Error()
		return r
	}
	b, choice, err := env.choose(ModeAuto, opts, opts.cpu())
	if err != nil { // auto mode does not fail; kept for safety
		choice = Choice{Backend: BackendCPU, Reason: err.Error()}
	}
	_ = CloseBackend(b)
	r.Auto = choice
	if plan, err := planDevice(ModeGPU, env.nvml, env.opencl, r.MemoryNeeded, opts.reserve()); err != nil {
		r.GPUMode = "fails: " + err.Error()
	} else {
		r.GPUMode = "would run: " + plan.reason + " (the kernel is built and self-tested only when selected)"
	}
	return r
}

// summary is the one-line state of NVML.
func (inv Inventory) summary() string {
	if len(inv.GPUs) == 0 {
		return inv.Reason
	}
	s := plural(len(inv.GPUs), "GPU")
	if inv.DriverVersion != "" {
		s += ", driver " + inv.DriverVersion
	}
	if inv.NVMLVersion != "" {
		s += ", NVML " + inv.NVMLVersion
	}
	return s
}

// summary is the one-line state of OpenCL.
func (inv OpenCLInventory) summary() string {
	if len(inv.Devices) == 0 {
		return inv.Reason
	}
	return plural(len(inv.Devices), "device")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// String formats the report as `weightfs gpus` prints it.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "NVML (%s): %s\n", r.NVML.Library, r.NVML.summary())
	for _, g := range r.NVML.GPUs {
		fmt.Fprintf(&b, "  GPU %d  %s  PCI %s  memory %s free of %s", g.Index, g.Name, g.PCI, formatBytes(g.FreeMemory), formatBytes(g.TotalMemory))
		if g.UtilizationKnown {
			fmt.Fprintf(&b, "  utilisation %d%% (memory %d%%)", g.GPUUtilization, g.MemoryUtilization)
		}
		if g.UUID != "" {
			fmt.Fprintf(&b, "  %s", g.UUID)
		}
		b.WriteString("\n")
	}
	for _, p := range r.NVML.Problems {
		fmt.Fprintf(&b, "  skipped: %s\n", p)
	}
	fmt.Fprintf(&b, "OpenCL (%s): %s\n", r.OpenCL.Library, r.OpenCL.summary())
	for _, d := range r.OpenCL.Devices {
		fmt.Fprintf(&b, "  %s  (%s, %d compute units, %s, driver %s)\n", d, d.Version, d.ComputeUnits, formatBytes(d.GlobalMemory), d.DriverVersion)
	}
	for _, p := range r.OpenCL.Problems {
		fmt.Fprintf(&b, "  skipped: %s\n", p)
	}
	fmt.Fprintf(&b, "GPU diff buffers: %d x %s chunks, %s of device memory\n", slotCount, formatBytes(uint64(r.ChunkBytes)), formatBytes(r.MemoryNeeded))
	fmt.Fprintf(&b, "--diff auto runs %s\n", r.Auto)
	fmt.Fprintf(&b, "--diff gpu %s\n", r.GPUMode)
	return b.String()
}

// WriteTo writes String to w.
func (r Report) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, r.String())
	return int64(n), err
}
