package gpu

import (
	"fmt"
	"strings"

	"github.com/weightfs/weightfs/delta"
)

// Diff modes, as the CLI's --diff flag spells them.
const (
	ModeAuto = "auto"
	ModeCPU  = "cpu"
	ModeGPU  = "gpu"
)

// Backend kinds in a Choice.
const (
	BackendCPU = "cpu"
	BackendGPU = "gpu"
)

// DefaultMemoryReserve is the device memory an NVIDIA GPU must have free beyond the diff's
// buffers: the OpenCL context, the compiled kernel and other tenants of the card need room.
const DefaultMemoryReserve = 256 << 20

// Choice says which diff backend runs and why.
type Choice struct {
	Backend string // BackendCPU or BackendGPU
	Reason  string // one sentence: what was found, what failed, or what was asked
	// Device names the OpenCL device of the GPU backend; empty for the CPU backend.
	Device string
	// OnCPUDevice is true when the GPU backend's kernel runs on an OpenCL CPU device (such as
	// PoCL), which only gpu mode on a machine without an NVIDIA GPU allows.
	OnCPUDevice bool
	// Err is, when auto mode fell back to the CPU, why the GPU was not used (test it with
	// errors.Is against ErrNoGPU, ErrNoOpenCL, ErrNoDevice, ErrNoRoom, ErrSelfTest); nil
	// otherwise.
	Err error
}

// String is the line `weightfs gpus` and the logs print.
func (c Choice) String() string { return c.Backend + ": " + c.Reason }

// Options configure SelectWith and DiscoverWith. The zero value is the production setting.
type Options struct {
	Mode string // ModeAuto (also ""), ModeCPU or ModeGPU
	// Logf, if set, receives one line per step of the decision.
	Logf func(format string, args ...any)
	// NVMLLibrary and OpenCLLibrary name the libraries to dlopen (defaults DefaultNVMLLibrary
	// and DefaultOpenCLLibrary); a name that does not exist simulates a machine without them.
	NVMLLibrary   string
	OpenCLLibrary string
	// NVML, if set, is used instead of loading NVMLLibrary (tests pass go-nvml's mocks).
	NVML NVMLInterface
	// ChunkBytes is the OpenCL backend's chunk size (default DefaultChunkBytes).
	ChunkBytes int
	// MemoryReserve overrides DefaultMemoryReserve.
	MemoryReserve uint64
	// CPU is the backend to fall back to and to self-test against (default delta.NewCPUDiff()).
	CPU delta.DiffBackend
}

func (o Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

func (o Options) cpu() delta.DiffBackend {
	if o.CPU != nil {
		return o.CPU
	}
	return delta.NewCPUDiff()
}

func (o Options) reserve() uint64 {
	if o.MemoryReserve != 0 {
		return o.MemoryReserve
	}
	return DefaultMemoryReserve
}

func orDefault(name, def string) string {
	if name == "" {
		return def
	}
	return name
}

// Select picks the diff backend for mode ("auto", "cpu" or "gpu"; "" means auto) with the
// production defaults, logging each step through logf (which may be nil). See SelectWith.
func Select(mode string, logf func(format string, args ...any)) (delta.DiffBackend, Choice, error) {
	return SelectWith(Options{Mode: mode, Logf: logf})
}

// SelectWith picks the diff backend as the package comment describes. In auto mode it never
// fails (except on an unknown mode): every obstacle to the GPU becomes a CPU Choice whose
// Reason names it. In gpu mode the obstacle is the error. The GPU backend it returns is an
// *OpenCLBackend, which the caller must Close (CloseBackend does that for any backend).
func SelectWith(opts Options) (delta.DiffBackend, Choice, error) {
	mode, err := normalizeMode(opts.Mode)
	if err != nil {
		return nil, Choice{}, err
	}
	cpu := opts.cpu()
	if mode == ModeCPU {
		return cpu, Choice{Backend: BackendCPU, Reason: "the CPU backend was asked for (--diff cpu)"}, nil
	}
	if !gpuSupport {
		if mode == ModeGPU {
			return nil, Choice{}, fmt.Errorf("--diff gpu: %w", ErrNoGPUSupport)
		}
		return cpu, noGPUSupportChoice(), nil
	}
	env := discover(opts, mode == ModeGPU)
	return env.choose(mode, opts, cpu)
}

// CloseBackend releases b if it holds resources (the OpenCL backend does; the CPU one does not).
func CloseBackend(b delta.DiffBackend) error {
	if c, ok := b.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

func normalizeMode(mode string) (string, error) {
	switch m := strings.ToLower(strings.TrimSpace(mode)); m {
	case "", ModeAuto:
		return ModeAuto, nil
	case ModeCPU, ModeGPU:
		return m, nil
	}
	return "", fmt.Errorf("%w %q: want auto, cpu or gpu", ErrBadMode, mode)
}

// environment is what discovery found: the NVML inventory and, if it was loaded, OpenCL.
type environment struct {
	nvml   Inventory
	lib    *clLib // nil when OpenCL was not loaded
	opencl OpenCLInventory
}

// discover asks NVML, then OpenCL. OpenCL is loaded only when it can matter: when NVML found
// a GPU, or when forced (gpu mode and the report), so a plain auto run on a GPU-less machine
// does not start an OpenCL runtime at all.
func discover(opts Options, forceOpenCL bool) environment {
	var env environment
	env.nvml = discoverNVML(opts)
	opts.logf("gpu: NVML: %s", env.nvml.summary())
	clName := orDefault(opts.OpenCLLibrary, DefaultOpenCLLibrary)
	env.opencl = OpenCLInventory{Library: clName, Reason: "not loaded: no NVIDIA GPU to use it for"}
	if len(env.nvml.GPUs) == 0 && !forceOpenCL {
		return env
	}
	cl, err := loadOpenCL(clName)
	if err != nil {
		env.opencl.Reason = err.Error()
	} else {
		env.lib = cl
		env.opencl = discoverOpenCL(cl)
	}
	opts.logf("gpu: OpenCL: %s", env.opencl.summary())
	return env
}

// choose plans the device, starts the backend on it and self-tests it; in auto mode any
// failure falls back to cpu.
func (env environment) choose(mode string, opts Options, cpu delta.DiffBackend) (delta.DiffBackend, Choice, error) {
	chunk := normalizeChunk(opts.ChunkBytes)
	plan, err := planDevice(mode, env.nvml, env.opencl, DeviceMemoryNeeded(chunk), opts.reserve())
	var b *OpenCLBackend
	if err == nil {
		opts.logf("gpu: %s", plan.reason)
		b, err = newOpenCLBackend(env.lib, plan.device, chunk)
		if err == nil {
			if err = selfTest(b, cpu); err != nil {
				b.Close()
			}
		}
	}
	if err != nil {
		if mode == ModeGPU {
			return nil, Choice{}, fmt.Errorf("--diff gpu: %w", err)
		}
		c := Choice{Backend: BackendCPU, Reason: "GPU diff not used: " + err.Error(), Err: err}
		opts.logf("gpu: %s", c)
		return cpu, c, nil
	}
	c := Choice{Backend: BackendGPU, Reason: plan.reason + "; self-test passed", Device: plan.device.String(), OnCPUDevice: !plan.device.IsGPU()}
	opts.logf("gpu: %s", c)
	return b, c, nil
}

// devicePlan is the OpenCL device the diff would run on, and why.
type devicePlan struct {
	device CLDevice
	reason string
}

// planDevice applies the selection rules to what discovery found, without touching a device:
//   - with NVIDIA GPUs: the one with the most free memory, which must have need+reserve bytes
//     free and an OpenCL device at its PCI address;
//   - without, in gpu mode only: the first usable OpenCL GPU device, else any usable OpenCL
//     device (a CPU device such as PoCL), with at least need bytes of global memory.
func planDevice(mode string, nv Inventory, cl OpenCLInventory, need, reserve uint64) (devicePlan, error) {
	if g, ok := nv.MostFree(); ok {
		label := fmt.Sprintf("GPU %d (%s, PCI %s, %s free of %s)", g.Index, g.Name, g.PCI, formatBytes(g.FreeMemory), formatBytes(g.TotalMemory))
		if g.FreeMemory < need+reserve {
			return devicePlan{}, fmt.Errorf("%w: %s, the one with the most free memory, needs %s for the diff buffers plus %s reserve",
				ErrNoRoom, label, formatBytes(need), formatBytes(reserve))
		}
		if !cl.Loaded || len(cl.Devices) == 0 {
			return devicePlan{}, fmt.Errorf("%w: %s found, but %s: %s", ErrNoOpenCL, label, cl.Library, cl.Reason)
		}
		for _, d := range cl.Devices {
			if d.matchesPCI(g.PCI) {
				return devicePlan{device: d, reason: fmt.Sprintf("%s, the NVIDIA GPU with the most free memory, is OpenCL %s", label, d)}, nil
			}
		}
		return devicePlan{}, fmt.Errorf("%w: %s found, but no OpenCL device reports PCI address %s (OpenCL devices: %s)",
			ErrNoDevice, label, g.PCI, deviceList(cl.Devices))
	}
	if mode != ModeGPU {
		return devicePlan{}, fmt.Errorf("%w: %s", ErrNoGPU, nv.Reason)
	}
	if !cl.Loaded || len(cl.Devices) == 0 {
		return devicePlan{}, fmt.Errorf("%w (%s), and %w: %s", ErrNoGPU, nv.Reason, ErrNoOpenCL, cl.Reason)
	}
	var usable []CLDevice
	for _, d := range cl.Devices {
		if d.Available && d.Compiler && d.LittleEndian && d.GlobalMemory >= need {
			usable = append(usable, d)
		}
	}
	if len(usable) == 0 {
		return devicePlan{}, fmt.Errorf("%w (%s), and %w: none of %s is available, compiles kernels, is little-endian and has %s of memory",
			ErrNoGPU, nv.Reason, ErrNoDevice, deviceList(cl.Devices), formatBytes(need))
	}
	for _, d := range usable {
		if d.IsGPU() {
			return devicePlan{device: d, reason: fmt.Sprintf("no NVIDIA GPU (%s); --diff gpu uses OpenCL %s", nv.Reason, d)}, nil
		}
	}
	d := usable[0]
	return devicePlan{device: d, reason: fmt.Sprintf("no NVIDIA GPU (%s); --diff gpu was asked explicitly, so the OpenCL kernel runs on %s: a CPU, not a GPU", nv.Reason, d)}, nil
}

func deviceList(devs []CLDevice) string {
	if len(devs) == 0 {
		return "none"
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.String()
	}
	return strings.Join(names, "; ")
}

// formatBytes prints a byte count in binary units, e.g. "79.2 GiB".
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// noGPUSupportChoice is what auto mode runs in a binary built without cgo.
func noGPUSupportChoice() Choice {
	return Choice{Backend: BackendCPU, Reason: ErrNoGPUSupport.Error() + "; the CPU diff runs", Err: ErrNoGPUSupport}
}
