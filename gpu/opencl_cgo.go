package gpu

// The OpenCL loader: libOpenCL.so.1 is opened with dlopen and every entry point the diff uses
// is looked up with dlsym into a table, so the binary has no link-time dependency on OpenCL
// (the approach of go-nvml's own loader). No OpenCL header is needed either: the few types
// the calls use are declared below (every OpenCL object is an opaque pointer, carried in Go as
// a uintptr that Go never dereferences).

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t wcl_int;
typedef uint32_t wcl_uint;
typedef uint64_t wcl_ulong;
typedef void *wcl_obj;

enum {
	F_GetPlatformIDs, F_GetPlatformInfo, F_GetDeviceIDs, F_GetDeviceInfo,
	F_CreateContext, F_CreateCommandQueue, F_CreateProgramWithSource, F_BuildProgram,
	F_GetProgramBuildInfo, F_CreateKernel, F_SetKernelArg, F_GetKernelWorkGroupInfo,
	F_CreateBuffer, F_EnqueueWriteBuffer, F_EnqueueReadBuffer, F_EnqueueNDRangeKernel,
	F_Flush, F_Finish, F_ReleaseMemObject, F_ReleaseKernel, F_ReleaseProgram,
	F_ReleaseCommandQueue, F_ReleaseContext, F_COUNT
};

static const char *const wcl_names[F_COUNT] = {
	"clGetPlatformIDs", "clGetPlatformInfo", "clGetDeviceIDs", "clGetDeviceInfo",
	"clCreateContext", "clCreateCommandQueue", "clCreateProgramWithSource", "clBuildProgram",
	"clGetProgramBuildInfo", "clCreateKernel", "clSetKernelArg", "clGetKernelWorkGroupInfo",
	"clCreateBuffer", "clEnqueueWriteBuffer", "clEnqueueReadBuffer", "clEnqueueNDRangeKernel",
	"clFlush", "clFinish", "clReleaseMemObject", "clReleaseKernel", "clReleaseProgram",
	"clReleaseCommandQueue", "clReleaseContext",
};

typedef struct {
	void *fn[F_COUNT];
} wcl_table;

// wcl_load opens lib and fills t. On failure it writes why into err and returns non-zero.
static int wcl_load(wcl_table *t, const char *lib, char *err, size_t errlen) {
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *why = dlerror();
		snprintf(err, errlen, "%s", why ? why : "dlopen failed");
		return 1;
	}
	for (int i = 0; i < F_COUNT; i++) {
		dlerror();
		t->fn[i] = dlsym(h, wcl_names[i]);
		if (t->fn[i] == NULL) {
			snprintf(err, errlen, "%s has no symbol %s", lib, wcl_names[i]);
			dlclose(h);
			return 1;
		}
	}
	// The handle stays open for the life of the process: OpenCL vendor drivers start threads
	// and register atexit handlers, and unloading them under those is not safe.
	return 0;
}

#define WCL(t, name, type) ((type)(t)->fn[F_##name])

static wcl_int wcl_GetPlatformIDs(wcl_table *t, wcl_uint n, uintptr_t *out, wcl_uint *count) {
	return WCL(t, GetPlatformIDs, wcl_int (*)(wcl_uint, wcl_obj *, wcl_uint *))(n, (wcl_obj *)out, count);
}
static wcl_int wcl_GetPlatformInfo(wcl_table *t, uintptr_t p, wcl_uint param, size_t size, void *val, size_t *ret) {
	return WCL(t, GetPlatformInfo, wcl_int (*)(wcl_obj, wcl_uint, size_t, void *, size_t *))((wcl_obj)p, param, size, val, ret);
}
static wcl_int wcl_GetDeviceIDs(wcl_table *t, uintptr_t p, wcl_ulong type, wcl_uint n, uintptr_t *out, wcl_uint *count) {
	return WCL(t, GetDeviceIDs, wcl_int (*)(wcl_obj, wcl_ulong, wcl_uint, wcl_obj *, wcl_uint *))((wcl_obj)p, type, n, (wcl_obj *)out, count);
}
static wcl_int wcl_GetDeviceInfo(wcl_table *t, uintptr_t d, wcl_uint param, size_t size, void *val, size_t *ret) {
	return WCL(t, GetDeviceInfo, wcl_int (*)(wcl_obj, wcl_uint, size_t, void *, size_t *))((wcl_obj)d, param, size, val, ret);
}
static uintptr_t wcl_CreateContext(wcl_table *t, uintptr_t platform, uintptr_t device, wcl_int *err) {
	const intptr_t clContextPlatform = 0x1084;
	intptr_t props[3] = {clContextPlatform, (intptr_t)platform, 0};
	wcl_obj dev = (wcl_obj)device;
	return (uintptr_t)WCL(t, CreateContext, wcl_obj (*)(const intptr_t *, wcl_uint, const wcl_obj *, void *, void *, wcl_int *))(props, 1, &dev, NULL, NULL, err);
}
static uintptr_t wcl_CreateCommandQueue(wcl_table *t, uintptr_t ctx, uintptr_t device, wcl_int *err) {
	return (uintptr_t)WCL(t, CreateCommandQueue, wcl_obj (*)(wcl_obj, wcl_obj, wcl_ulong, wcl_int *))((wcl_obj)ctx, (wcl_obj)device, 0, err);
}
static uintptr_t wcl_CreateProgramWithSource(wcl_table *t, uintptr_t ctx, const char *src, size_t len, wcl_int *err) {
	return (uintptr_t)WCL(t, CreateProgramWithSource, wcl_obj (*)(wcl_obj, wcl_uint, const char **, const size_t *, wcl_int *))((wcl_obj)ctx, 1, &src, &len, err);
}
static wcl_int wcl_BuildProgram(wcl_table *t, uintptr_t prog, uintptr_t device, const char *opts) {
	wcl_obj dev = (wcl_obj)device;
	return WCL(t, BuildProgram, wcl_int (*)(wcl_obj, wcl_uint, const wcl_obj *, const char *, void *, void *))((wcl_obj)prog, 1, &dev, opts, NULL, NULL);
}
static wcl_int wcl_GetProgramBuildInfo(wcl_table *t, uintptr_t prog, uintptr_t device, wcl_uint param, size_t size, void *val, size_t *ret) {
	return WCL(t, GetProgramBuildInfo, wcl_int (*)(wcl_obj, wcl_obj, wcl_uint, size_t, void *, size_t *))((wcl_obj)prog, (wcl_obj)device, param, size, val, ret);
}
static uintptr_t wcl_CreateKernel(wcl_table *t, uintptr_t prog, const char *name, wcl_int *err) {
	return (uintptr_t)WCL(t, CreateKernel, wcl_obj (*)(wcl_obj, const char *, wcl_int *))((wcl_obj)prog, name, err);
}
static wcl_int wcl_SetKernelArgMem(wcl_table *t, uintptr_t k, wcl_uint i, uintptr_t mem) {
	wcl_obj m = (wcl_obj)mem;
	return WCL(t, SetKernelArg, wcl_int (*)(wcl_obj, wcl_uint, size_t, const void *))((wcl_obj)k, i, sizeof m, &m);
}
static wcl_int wcl_SetKernelArgUint(wcl_table *t, uintptr_t k, wcl_uint i, wcl_uint v) {
	return WCL(t, SetKernelArg, wcl_int (*)(wcl_obj, wcl_uint, size_t, const void *))((wcl_obj)k, i, sizeof v, &v);
}
static wcl_int wcl_GetKernelWorkGroupSize(wcl_table *t, uintptr_t k, uintptr_t device, size_t *out) {
	return WCL(t, GetKernelWorkGroupInfo, wcl_int (*)(wcl_obj, wcl_obj, wcl_uint, size_t, void *, size_t *))((wcl_obj)k, (wcl_obj)device, 0x11B0, sizeof *out, out, NULL); // CL_KERNEL_WORK_GROUP_SIZE
}
static uintptr_t wcl_CreateBuffer(wcl_table *t, uintptr_t ctx, wcl_ulong flags, size_t size, wcl_int *err) {
	return (uintptr_t)WCL(t, CreateBuffer, wcl_obj (*)(wcl_obj, wcl_ulong, size_t, void *, wcl_int *))((wcl_obj)ctx, flags, size, NULL, err);
}
static wcl_int wcl_EnqueueWriteBuffer(wcl_table *t, uintptr_t q, uintptr_t mem, wcl_uint blocking, size_t off, size_t size, const void *src) {
	return WCL(t, EnqueueWriteBuffer, wcl_int (*)(wcl_obj, wcl_obj, wcl_uint, size_t, size_t, const void *, wcl_uint, const void *, void *))((wcl_obj)q, (wcl_obj)mem, blocking, off, size, src, 0, NULL, NULL);
}
static wcl_int wcl_EnqueueReadBuffer(wcl_table *t, uintptr_t q, uintptr_t mem, size_t off, size_t size, void *dst) {
	return WCL(t, EnqueueReadBuffer, wcl_int (*)(wcl_obj, wcl_obj, wcl_uint, size_t, size_t, void *, wcl_uint, const void *, void *))((wcl_obj)q, (wcl_obj)mem, 1, off, size, dst, 0, NULL, NULL);
}
static wcl_int wcl_EnqueueNDRangeKernel1D(wcl_table *t, uintptr_t q, uintptr_t k, size_t global, size_t local) {
	return WCL(t, EnqueueNDRangeKernel, wcl_int (*)(wcl_obj, wcl_obj, wcl_uint, const size_t *, const size_t *, const size_t *, wcl_uint, const void *, void *))((wcl_obj)q, (wcl_obj)k, 1, NULL, &global, &local, 0, NULL, NULL);
}
static wcl_int wcl_Flush(wcl_table *t, uintptr_t q) {
	return WCL(t, Flush, wcl_int (*)(wcl_obj))((wcl_obj)q);
}
static wcl_int wcl_Finish(wcl_table *t, uintptr_t q) {
	return WCL(t, Finish, wcl_int (*)(wcl_obj))((wcl_obj)q);
}
static wcl_int wcl_Release(wcl_table *t, int which, uintptr_t obj) {
	if (which < 0 || F_ReleaseMemObject + which > F_ReleaseContext) {
		return -30; // CL_INVALID_VALUE
	}
	return ((wcl_int (*)(wcl_obj))t->fn[F_ReleaseMemObject + which])((wcl_obj)obj);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// OpenCL constants used only by the loader's calls (the others are in opencl.go).
const (
	clDeviceNotFound      = -1
	clPlatformNotFoundKHR = -1001
	clDeviceTypeAll       = 0xFFFFFFFF
	clProgramBuildLog     = 0x1183
)

// clLib is a loaded OpenCL library: the table of its entry points. Its methods are thin
// wrappers that turn OpenCL error codes into Go errors; they hold no other state, so a clLib
// may be shared by several sessions.
type clLib struct {
	name string
	t    *C.wcl_table // C memory: the table outlives any Go move
}

// loadOpenCL opens the OpenCL library name (an ICD loader such as ocl-icd's libOpenCL.so.1).
func loadOpenCL(name string) (*clLib, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	t := (*C.wcl_table)(C.calloc(1, C.size_t(unsafe.Sizeof(C.wcl_table{}))))
	if t == nil {
		return nil, fmt.Errorf("%w: allocate the loader table", ErrNoOpenCL)
	}
	var why [512]C.char
	if C.wcl_load(t, cname, &why[0], C.size_t(len(why))) != 0 {
		C.free(unsafe.Pointer(t))
		return nil, fmt.Errorf("%w: load %s: %s", ErrNoOpenCL, name, C.GoString(&why[0]))
	}
	return &clLib{name: name, t: t}, nil
}

// clCheck turns an OpenCL status into an error naming the call.
func clCheck(call string, code C.wcl_int) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: %s", ErrOpenCL, call, clCodeName(int32(code)))
}

func (l *clLib) platformIDs() ([]uintptr, error) {
	var n C.wcl_uint
	code := C.wcl_GetPlatformIDs(l.t, 0, nil, &n)
	if code == clPlatformNotFoundKHR || (code == 0 && n == 0) {
		return nil, nil
	}
	if err := clCheck("clGetPlatformIDs", code); err != nil {
		return nil, err
	}
	ids := make([]uintptr, n)
	if err := clCheck("clGetPlatformIDs", C.wcl_GetPlatformIDs(l.t, n, (*C.uintptr_t)(unsafe.Pointer(&ids[0])), &n)); err != nil {
		return nil, err
	}
	return ids[:min(int(n), len(ids))], nil
}

func (l *clLib) platformInfo(p uintptr, param uint32) ([]byte, error) {
	var size C.size_t
	if err := clCheck("clGetPlatformInfo", C.wcl_GetPlatformInfo(l.t, C.uintptr_t(p), C.wcl_uint(param), 0, nil, &size)); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, nil
	}
	buf := make([]byte, size)
	err := clCheck("clGetPlatformInfo", C.wcl_GetPlatformInfo(l.t, C.uintptr_t(p), C.wcl_uint(param), size, unsafe.Pointer(&buf[0]), nil))
	return buf, err
}

// deviceIDs lists every device of platform p; a platform without devices gives none.
func (l *clLib) deviceIDs(p uintptr) ([]uintptr, error) {
	var n C.wcl_uint
	code := C.wcl_GetDeviceIDs(l.t, C.uintptr_t(p), clDeviceTypeAll, 0, nil, &n)
	if code == clDeviceNotFound || (code == 0 && n == 0) {
		return nil, nil
	}
	if err := clCheck("clGetDeviceIDs", code); err != nil {
		return nil, err
	}
	ids := make([]uintptr, n)
	if err := clCheck("clGetDeviceIDs", C.wcl_GetDeviceIDs(l.t, C.uintptr_t(p), clDeviceTypeAll, n, (*C.uintptr_t)(unsafe.Pointer(&ids[0])), &n)); err != nil {
		return nil, err
	}
	return ids[:min(int(n), len(ids))], nil
}

func (l *clLib) deviceInfo(d uintptr, param uint32) ([]byte, error) {
	var size C.size_t
	if err := clCheck("clGetDeviceInfo", C.wcl_GetDeviceInfo(l.t, C.uintptr_t(d), C.wcl_uint(param), 0, nil, &size)); err != nil {
		return nil, err
	}
	if size == 0 {
		return nil, nil
	}
	buf := make([]byte, size)
	err := clCheck("clGetDeviceInfo", C.wcl_GetDeviceInfo(l.t, C.uintptr_t(d), C.wcl_uint(param), size, unsafe.Pointer(&buf[0]), nil))
	return buf, err
}

func (l *clLib) createContext(platform, device uintptr) (uintptr, error) {
	var code C.wcl_int
	h := C.wcl_CreateContext(l.t, C.uintptr_t(platform), C.uintptr_t(device), &code)
	return uintptr(h), clCheck("clCreateContext", code)
}

func (l *clLib) createQueue(ctx, device uintptr) (uintptr, error) {
	var code C.wcl_int
	h := C.wcl_CreateCommandQueue(l.t, C.uintptr_t(ctx), C.uintptr_t(device), &code)
	return uintptr(h), clCheck("clCreateCommandQueue", code)
}

// buildProgram compiles src for device; a failed build's error carries the compiler's log.
func (l *clLib) buildProgram(ctx, device uintptr, src, options string) (uintptr, error) {
	csrc := C.CString(src)
	defer C.free(unsafe.Pointer(csrc))
	var code C.wcl_int
	prog := C.wcl_CreateProgramWithSource(l.t, C.uintptr_t(ctx), csrc, C.size_t(len(src)), &code)
	if err := clCheck("clCreateProgramWithSource", code); err != nil {
		return 0, err
	}
	copts := C.CString(options)
	defer C.free(unsafe.Pointer(copts))
	if err := clCheck("clBuildProgram", C.wcl_BuildProgram(l.t, prog, C.uintptr_t(device), copts)); err != nil {
		buildLog := l.buildLog(uintptr(prog), device)
		l.release(relProgram, uintptr(prog))
		return 0, fmt.Errorf("%w; build log:\n%s", err, buildLog)
	}
	return uintptr(prog), nil
}

func (l *clLib) buildLog(prog, device uintptr) string {
	var size C.size_t
	if C.wcl_GetProgramBuildInfo(l.t, C.uintptr_t(prog), C.uintptr_t(device), clProgramBuildLog, 0, nil, &size) != 0 || size == 0 {
		return "(no log)"
	}
	buf := make([]byte, size)
	if C.wcl_GetProgramBuildInfo(l.t, C.uintptr_t(prog), C.uintptr_t(device), clProgramBuildLog, size, unsafe.Pointer(&buf[0]), nil) != 0 {
		return "(no log)"
	}
	return cStringBytes(buf)
}

func (l *clLib) createKernel(prog uintptr, name string) (uintptr, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var code C.wcl_int
	k := C.wcl_CreateKernel(l.t, C.uintptr_t(prog), cname, &code)
	return uintptr(k), clCheck("clCreateKernel "+name, code)
}

func (l *clLib) kernelWorkGroupSize(k, device uintptr) (int, error) {
	var n C.size_t
	err := clCheck("clGetKernelWorkGroupInfo", C.wcl_GetKernelWorkGroupSize(l.t, C.uintptr_t(k), C.uintptr_t(device), &n))
	return int(n), err
}

func (l *clLib) setArgMem(k uintptr, i int, mem uintptr) error {
	return clCheck(fmt.Sprintf("clSetKernelArg %d", i), C.wcl_SetKernelArgMem(l.t, C.uintptr_t(k), C.wcl_uint(i), C.uintptr_t(mem)))
}

func (l *clLib) setArgUint(k uintptr, i int, v uint32) error {
	return clCheck(fmt.Sprintf("clSetKernelArg %d", i), C.wcl_SetKernelArgUint(l.t, C.uintptr_t(k), C.wcl_uint(i), C.wcl_uint(v)))
}

func (l *clLib) createBuffer(ctx uintptr, flags uint64, size int) (uintptr, error) {
	var code C.wcl_int
	m := C.wcl_CreateBuffer(l.t, C.uintptr_t(ctx), C.wcl_ulong(flags), C.size_t(size), &code)
	return uintptr(m), clCheck(fmt.Sprintf("clCreateBuffer of %d bytes", size), code)
}

// writeBuffer copies src into mem at off. Without blocking the copy happens later, so the
// caller must keep src pinned (runtime.Pinner) and unmodified until the queue has finished.
func (l *clLib) writeBuffer(q, mem uintptr, blocking bool, off int, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	var b C.wcl_uint
	if blocking {
		b = 1
	}
	return clCheck("clEnqueueWriteBuffer", C.wcl_EnqueueWriteBuffer(l.t, C.uintptr_t(q), C.uintptr_t(mem), b, C.size_t(off), C.size_t(len(src)), unsafe.Pointer(&src[0])))
}

// readBuffer copies len(dst) bytes of mem at off into dst and returns when they are there.
func (l *clLib) readBuffer(q, mem uintptr, off int, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	return clCheck("clEnqueueReadBuffer", C.wcl_EnqueueReadBuffer(l.t, C.uintptr_t(q), C.uintptr_t(mem), C.size_t(off), C.size_t(len(dst)), unsafe.Pointer(&dst[0])))
}

func (l *clLib) run1D(q, k uintptr, global, local int) error {
	return clCheck("clEnqueueNDRangeKernel", C.wcl_EnqueueNDRangeKernel1D(l.t, C.uintptr_t(q), C.uintptr_t(k), C.size_t(global), C.size_t(local)))
}

func (l *clLib) flush(q uintptr) error {
	return clCheck("clFlush", C.wcl_Flush(l.t, C.uintptr_t(q)))
}

func (l *clLib) finish(q uintptr) error {
	return clCheck("clFinish", C.wcl_Finish(l.t, C.uintptr_t(q)))
}

// release drops the reference to an OpenCL object; a zero handle is ignored.
func (l *clLib) release(kind relKind, h uintptr) {
	if h == 0 {
		return
	}
	// A failed release leaks one object of a session being torn down; there is nothing better
	// to do with the error.
	_ = C.wcl_Release(l.t, C.int(kind), C.uintptr_t(h))
}

// clCodeName spells an OpenCL status code for error messages.
func clCodeName(code int32) string {
	names := map[int32]string{
		-1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -3: "CL_COMPILER_NOT_AVAILABLE",
		-4: "CL_MEM_OBJECT_ALLOCATION_FAILURE", -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY",
		-11: "CL_BUILD_PROGRAM_FAILURE", -30: "CL_INVALID_VALUE", -32: "CL_INVALID_PLATFORM",
		-33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT", -36: "CL_INVALID_COMMAND_QUEUE",
		-38: "CL_INVALID_MEM_OBJECT", -43: "CL_INVALID_BUILD_OPTIONS", -44: "CL_INVALID_PROGRAM",
		-46: "CL_INVALID_KERNEL_NAME", -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX",
		-50: "CL_INVALID_ARG_VALUE", -51: "CL_INVALID_ARG_SIZE", -52: "CL_INVALID_KERNEL_ARGS",
		-54: "CL_INVALID_WORK_GROUP_SIZE", -55: "CL_INVALID_WORK_ITEM_SIZE", -61: "CL_INVALID_BUFFER_SIZE",
		-63: "CL_INVALID_GLOBAL_WORK_SIZE", -1001: "CL_PLATFORM_NOT_FOUND_KHR",
	}
	if n, ok := names[code]; ok {
		return fmt.Sprintf("%s (%d)", n, code)
	}
	return fmt.Sprintf("OpenCL error %d", code)
}
