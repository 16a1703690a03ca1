package gpu

import "errors"

// Sentinel errors of the package. Callers test with errors.Is; messages carry the context.
var (
	// ErrBadMode marks a diff mode other than "auto", "cpu" or "gpu".
	ErrBadMode = errors.New("unknown diff mode")
	// ErrNoGPU marks a machine where NVML reports no usable NVIDIA GPU.
	ErrNoGPU = errors.New("no NVIDIA GPU")
	// ErrNoOpenCL marks a missing or unusable OpenCL library, or one with no platform.
	ErrNoOpenCL = errors.New("OpenCL not available")
	// ErrNoDevice marks an OpenCL runtime without a device fit for the diff (none at the chosen
	// GPU's PCI address, none little-endian, none able to build the kernel).
	ErrNoDevice = errors.New("no usable OpenCL device")
	// ErrNoRoom marks a device without enough free memory for the diff's buffers.
	ErrNoRoom = errors.New("not enough device memory")
	// ErrSelfTest marks a kernel whose output differs from the CPU backend on the start-up input.
	ErrSelfTest = errors.New("GPU self-test failed")
	// ErrOpenCL marks a failed OpenCL call; the message names the call and the error code.
	ErrOpenCL = errors.New("OpenCL call failed")
	// ErrClosed marks use of a backend after Close.
	ErrClosed = errors.New("backend closed")
	// ErrBadPCIAddress marks a PCI bus ID that does not parse.
	ErrBadPCIAddress = errors.New("malformed PCI bus ID")
	// ErrNoGPUSupport marks a binary built without cgo (CGO_ENABLED=0, a static binary): it
	// cannot load NVML or OpenCL, so it always runs the CPU diff and --diff gpu fails.
	ErrNoGPUSupport = errors.New("this binary was built without GPU support (CGO_ENABLED=0)")
)
