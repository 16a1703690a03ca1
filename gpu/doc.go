// Package gpu finds NVIDIA GPUs (through NVML) and runs the bytewise diff of delta.DiffBackend
// on one of them with an OpenCL C kernel, falling back to the CPU backend, with a stated
// reason, everywhere else.
//
// Nothing here is linked against a GPU library: libnvidia-ml.so.1 is opened by go-nvml's
// loader and libOpenCL.so.1 by this package's own dlopen/dlsym table (opencl_cgo.go), both at
// run time. A machine without them builds and runs the same binary; it just gets the CPU
// backend. Loading them needs cgo (go-nvml does too): a binary built with CGO_ENABLED=0 (a
// static binary, `make static`) compiles nogpu.go instead of the loaders, always runs the CPU
// backend in auto mode, fails gpu mode, and says ErrNoGPUSupport in Choice and Report.
//
// Selection (Select, SelectWith):
//   - "cpu": always the CPU backend.
//   - "auto": the GPU only when NVML reports one, the one with the most free memory has room
//     for the diff's buffers, libOpenCL.so.1 has a device at that GPU's PCI address, and the
//     kernel passes a start-up self-test against the CPU backend; otherwise the CPU backend,
//     and Choice.Reason says which condition failed.
//   - "gpu": the same steps, but a failure is an error instead of a fallback. On a machine
//     with no NVIDIA GPU at all, any OpenCL device is accepted, including a CPU device such as
//     PoCL (so the kernel can be tested without a GPU); Choice.Reason then says plainly that
//     the "GPU" backend runs on a CPU device.
//
// The kernel (kernel.cl) compares the two inputs in 16-byte vectors, counts the changed
// elements per work-group, prefix-sums the counts in one work-group, and scatters positions
// and values to their final places, so the output is in ascending order exactly as the CPU
// reference produces it. Inputs are cut into chunks that stream through two buffer sets on two
// command queues, so the upload of one chunk overlaps the kernels of the other.
//
// The OpenCL backend is safe for concurrent use (calls are serialised: the device is one
// resource) and must be closed (it implements io.Closer) to release the device memory. No
// state lives in package variables.
package gpu
