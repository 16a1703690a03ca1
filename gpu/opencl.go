package gpu

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// DefaultOpenCLLibrary is the OpenCL library opened when Options.OpenCLLibrary is empty: the
// ICD loader, which dispatches to every installed driver (NVIDIA's, PoCL, ...).
const DefaultOpenCLLibrary = "libOpenCL.so.1"

// OpenCL constants used here (values from the Khronos headers, which are not needed to build).
const (
	clPlatformVersion = 0x0901
	clPlatformName    = 0x0902
	clPlatformVendor  = 0x0903

	clDeviceType              = 0x1000
	clDeviceMaxComputeUnits   = 0x1002
	clDeviceMaxWorkGroupSize  = 0x1004
	clDeviceMaxMemAllocSize   = 0x1010
	clDeviceGlobalMemSize     = 0x101F
	clDeviceEndianLittle      = 0x1026
	clDeviceAvailable         = 0x1027
	clDeviceCompilerAvailable = 0x1028
	clDeviceName              = 0x102B
	clDeviceVendor            = 0x102C
	clDriverVersion           = 0x102D
	clDeviceVersion           = 0x102F
	clDeviceExtensions        = 0x1030
	clDevicePCIBusInfoKHR     = 0x410F // cl_khr_pci_bus_info: {domain, bus, device, function}
	clDevicePCIBusIDNV        = 0x4008 // cl_nv_device_attribute_query
	clDevicePCISlotIDNV       = 0x4009
	clDevicePCIDomainIDNV     = 0x400A

	clDeviceTypeCPU         = 1 << 1
	clDeviceTypeGPU         = 1 << 2
	clDeviceTypeAccelerator = 1 << 3

	clMemReadWrite = 1 << 0
	clMemWriteOnly = 1 << 1
	clMemReadOnly  = 1 << 2
)

// CLDevice is one OpenCL device of one platform.
type CLDevice struct {
	Platform        string // platform name, e.g. "NVIDIA CUDA", "Portable Computing Language"
	PlatformVersion string
	Name            string
	Vendor          string
	Version         string // device OpenCL version
	DriverVersion   string
	Type            string // "GPU", "CPU", "accelerator" or "other"
	ComputeUnits    uint32
	GlobalMemory    uint64 // bytes
	MaxAlloc        uint64 // largest single buffer, bytes
	MaxWorkGroup    int
	Available       bool
	Compiler        bool // can build kernels from source
	LittleEndian    bool
	// PCIKnown says the device reported its PCI address. PCIExact says all four fields are
	// exact (cl_khr_pci_bus_info); NVIDIA's older query gives domain and bus reliably but a
	// slot whose encoding varies, so only domain and bus are compared then.
	PCIKnown bool
	PCIExact bool
	PCI      PCIAddress

	platformID uintptr
	deviceID   uintptr
}

// IsGPU reports whether the device says it is a GPU.
func (d CLDevice) IsGPU() bool { return d.Type == "GPU" }

// String names the device for reports and reasons.
func (d CLDevice) String() string {
	s := fmt.Sprintf("%s device %q of platform %q", d.Type, d.Name, d.Platform)
	if d.PCIKnown {
		s += " at PCI " + d.PCI.String()
	}
	return s
}

// matchesPCI reports whether d sits at the PCI address a (see PCIExact).
func (d CLDevice) matchesPCI(a PCIAddress) bool {
	if !d.PCIKnown || d.PCI.Domain != a.Domain || d.PCI.Bus != a.Bus {
		return false
	}
	return !d.PCIExact || (d.PCI.Device == a.Device && d.PCI.Function == a.Function)
}

// OpenCLInventory is what the OpenCL library reported.
type OpenCLInventory struct {
	Library  string
	Loaded   bool
	Reason   string // why Devices is empty, when it is
	Devices  []CLDevice
	Problems []string // devices left out because a query failed
}

// discoverOpenCL lists the devices of every platform of lib. Like DiscoverNVML it never
// fails: problems are described in the inventory.
func discoverOpenCL(lib *clLib) OpenCLInventory {
	inv := OpenCLInventory{Library: lib.name, Loaded: true}
	platforms, err := lib.platformIDs()
	if err != nil {
		inv.Reason = "list OpenCL platforms: " + err.Error()
		return inv
	}
	if len(platforms) == 0 {
		inv.Reason = fmt.Sprintf("%s is installed but reports no OpenCL platform (no ICD driver)", lib.name)
		return inv
	}
	for pi, p := range platforms {
		name := lib.platformString(p, clPlatformName)
		version := lib.platformString(p, clPlatformVersion)
		devices, err := lib.deviceIDs(p)
		if err != nil {
			inv.Problems = append(inv.Problems, fmt.Sprintf("platform %d %q: %v", pi, name, err))
			continue
		}
		for di, d := range devices {
			dev, err := describeCLDevice(lib, d)
			if err != nil {
				inv.Problems = append(inv.Problems, fmt.Sprintf("platform %q device %d: %v", name, di, err))
				continue
			}
			dev.Platform, dev.PlatformVersion, dev.platformID = name, version, p
			inv.Devices = append(inv.Devices, dev)
		}
	}
	if len(inv.Devices) == 0 {
		inv.Reason = fmt.Sprintf("%d OpenCL platforms but no usable device", len(platforms))
	}
	return inv
}

func (l *clLib) platformString(p uintptr, param uint32) string {
	b, err := l.platformInfo(p, param)
	if err != nil {
		return "?"
	}
	return cStringBytes(b)
}

// describeCLDevice queries what selection and the report need. The numeric queries are
// required; names are informative.
func describeCLDevice(lib *clLib, id uintptr) (CLDevice, error) {
	d := CLDevice{deviceID: id}
	str := func(param uint32) string {
		b, err := lib.deviceInfo(id, param)
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(cStringBytes(b))
	}
	d.Name, d.Vendor = str(clDeviceName), str(clDeviceVendor)
	d.Version, d.DriverVersion = str(clDeviceVersion), str(clDriverVersion)
	typ, err := deviceUint(lib, id, clDeviceType)
	if err != nil {
		return d, err
	}
	switch {
	case typ&clDeviceTypeGPU != 0:
		d.Type = "GPU"
	case typ&clDeviceTypeCPU != 0:
		d.Type = "CPU"
	case typ&clDeviceTypeAccelerator != 0:
		d.Type = "accelerator"
	default:
		d.Type = "other"
	}
	for _, q := range []struct {
		param uint32
		dst   *uint64
	}{{clDeviceGlobalMemSize, &d.GlobalMemory}, {clDeviceMaxMemAllocSize, &d.MaxAlloc}} {
		if *q.dst, err = deviceUint(lib, id, q.param); err != nil {
			return d, err
		}
	}
	cu, err := deviceUint(lib, id, clDeviceMaxComputeUnits)
	if err != nil {
		return d, err
	}
	wg, err := deviceUint(lib, id, clDeviceMaxWorkGroupSize)
	if err != nil {
		return d, err
	}
	d.ComputeUnits, d.MaxWorkGroup = uint32(cu), int(wg)
	flags := []struct {
		param uint32
		dst   *bool
	}{{clDeviceAvailable, &d.Available}, {clDeviceCompilerAvailable, &d.Compiler}, {clDeviceEndianLittle, &d.LittleEndian}}
	for _, q := range flags {
		v, err := deviceUint(lib, id, q.param)
		if err != nil {
			return d, err
		}
		*q.dst = v != 0
	}
	d.PCI, d.PCIKnown, d.PCIExact = devicePCI(lib, id, str(clDeviceExtensions))
	return d, nil
}

// devicePCI asks for the PCI address the two ways OpenCL offers it.
func devicePCI(lib *clLib, id uintptr, extensions string) (PCIAddress, bool, bool) {
	exts := strings.Fields(extensions)
	has := func(name string) bool {
		for _, e := range exts {
			if e == name {
				return true
			}
		}
		return false
	}
	if has("cl_khr_pci_bus_info") {
		if b, err := lib.deviceInfo(id, clDevicePCIBusInfoKHR); err == nil && len(b) >= 16 {
			ne := binary.NativeEndian
			return PCIAddress{Domain: ne.Uint32(b), Bus: ne.Uint32(b[4:]), Device: ne.Uint32(b[8:]), Function: ne.Uint32(b[12:])}, true, true
		}
	}
	if has("cl_nv_device_attribute_query") {
		bus, err := deviceUint(lib, id, clDevicePCIBusIDNV)
		if err != nil {
			return PCIAddress{}, false, false
		}
		a := PCIAddress{Bus: uint32(bus) & 0xff}
		if slot, err := deviceUint(lib, id, clDevicePCISlotIDNV); err == nil {
			a.Device, a.Function = uint32(slot)>>3, uint32(slot)&7 // informative only, see PCIExact
		}
		if dom, err := deviceUint(lib, id, clDevicePCIDomainIDNV); err == nil { // CUDA >= 10.2
			a.Domain = uint32(dom)
		}
		return a, true, false
	}
	return PCIAddress{}, false, false
}

// deviceUint reads an unsigned device property of 4 or 8 bytes (cl_uint, cl_bool, cl_ulong,
// size_t, bit fields), in host byte order as OpenCL returns it.
func deviceUint(lib *clLib, id uintptr, param uint32) (uint64, error) {
	b, err := lib.deviceInfo(id, param)
	if err != nil {
		return 0, fmt.Errorf("device property %#x: %w", param, err)
	}
	switch len(b) {
	case 4:
		return uint64(binary.NativeEndian.Uint32(b)), nil
	case 8:
		return binary.NativeEndian.Uint64(b), nil
	}
	return 0, fmt.Errorf("%w: device property %#x is %d bytes, want 4 or 8", ErrOpenCL, param, len(b))
}

// cStringBytes returns b up to its first NUL.
func cStringBytes(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// relKind selects the release call; the order is that of the F_Release* entries of the C
// table in opencl_cgo.go.
type relKind int

const (
	relMem relKind = iota
	relKernel
	relProgram
	relQueue
	relContext
)
