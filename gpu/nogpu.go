//go:build !cgo

// A binary built without cgo (CGO_ENABLED=0, a static binary) cannot load NVML (go-nvml
// needs cgo) nor OpenCL (opencl_cgo.go): this file stands in for both. Selection and the
// report say ErrNoGPUSupport, auto mode runs the CPU diff, gpu mode fails. The clLib methods
// exist only so that the OpenCL code above them compiles: loadOpenCL never returns a clLib.

package gpu

import "fmt"

// gpuSupport is false in a binary built without cgo.
const gpuSupport = false

// NVMLInterface stands for go-nvml's nvml.Interface, which needs cgo; Options.NVML is
// ignored here.
type NVMLInterface = any

func discoverNVML(opts Options) Inventory {
	return Inventory{Library: orDefault(opts.NVMLLibrary, DefaultNVMLLibrary), Reason: ErrNoGPUSupport.Error()}
}

// clLib is never made in a binary without cgo.
type clLib struct{ name string }

func loadOpenCL(name string) (*clLib, error) {
	return nil, fmt.Errorf("%w: %s not loaded", ErrNoGPUSupport, name)
}

func (l *clLib) platformIDs() ([]uintptr, error)                         { return nil, ErrNoGPUSupport }
func (l *clLib) platformInfo(uintptr, uint32) ([]byte, error)            { return nil, ErrNoGPUSupport }
func (l *clLib) deviceIDs(uintptr) ([]uintptr, error)                    { return nil, ErrNoGPUSupport }
func (l *clLib) deviceInfo(uintptr, uint32) ([]byte, error)              { return nil, ErrNoGPUSupport }
func (l *clLib) createContext(uintptr, uintptr) (uintptr, error)         { return 0, ErrNoGPUSupport }
func (l *clLib) createQueue(uintptr, uintptr) (uintptr, error)           { return 0, ErrNoGPUSupport }
func (l *clLib) buildProgram(_, _ uintptr, _, _ string) (uintptr, error) { return 0, ErrNoGPUSupport }
func (l *clLib) createKernel(uintptr, string) (uintptr, error)           { return 0, ErrNoGPUSupport }
func (l *clLib) kernelWorkGroupSize(uintptr, uintptr) (int, error)       { return 0, ErrNoGPUSupport }
func (l *clLib) setArgMem(uintptr, int, uintptr) error                   { return ErrNoGPUSupport }
func (l *clLib) setArgUint(uintptr, int, uint32) error                   { return ErrNoGPUSupport }
func (l *clLib) createBuffer(uintptr, uint64, int) (uintptr, error)      { return 0, ErrNoGPUSupport }
func (l *clLib) writeBuffer(_, _ uintptr, _ bool, _ int, _ []byte) error { return ErrNoGPUSupport }
func (l *clLib) readBuffer(_, _ uintptr, _ int, _ []byte) error          { return ErrNoGPUSupport }
func (l *clLib) run1D(_, _ uintptr, _, _ int) error                      { return ErrNoGPUSupport }
func (l *clLib) flush(uintptr) error                                     { return ErrNoGPUSupport }
func (l *clLib) finish(uintptr) error                                    { return ErrNoGPUSupport }
func (l *clLib) release(relKind, uintptr)                                {}
