//go:build cgo

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpuSupport is true in a binary built with cgo: go-nvml and the OpenCL loader need it.
const gpuSupport = true

// NVMLInterface is go-nvml's nvml.Interface, the type of Options.NVML. In a binary built
// without cgo it is an empty interface and Options.NVML is ignored.
type NVMLInterface = nvml.Interface

// discoverNVML loads NVML (opts.NVML if set, else opts.NVMLLibrary or DefaultNVMLLibrary) and
// lists its GPUs.
func discoverNVML(opts Options) Inventory {
	lib := opts.NVML
	nvmlName := orDefault(opts.NVMLLibrary, DefaultNVMLLibrary)
	if lib == nil {
		lib = nvml.New(nvml.WithLibraryPath(nvmlName))
	} else if opts.NVMLLibrary == "" {
		nvmlName = "NVML (injected)"
	}
	return DiscoverNVML(lib, nvmlName)
}

// DiscoverNVML lists the GPUs that lib reports. libName only labels the report. It never
// fails: a library that cannot be loaded or initialised yields an empty Inventory whose Reason
// says why, and a device whose queries fail is left out and named in Problems.
func DiscoverNVML(lib nvml.Interface, libName string) Inventory {
	inv := Inventory{Library: libName}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			inv.Reason = fmt.Sprintf("NVML library %s not found: no NVIDIA driver on this machine", libName)
		} else {
			inv.Reason = fmt.Sprintf("NVML (%s) did not initialise: %s", libName, ret.Error())
		}
		return inv
	}
	defer lib.Shutdown()
	inv.Loaded = true
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	}
	if v, ret := lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		inv.NVMLVersion = v
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		inv.Reason = "NVML could not count devices: " + ret.Error()
		return inv
	}
	for i := 0; i < count; i++ {
		g, err := describeGPU(lib, i)
		if err != nil {
			inv.Problems = append(inv.Problems, err.Error())
			continue
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	if len(inv.GPUs) == 0 {
		inv.Reason = "NVML reports no GPUs"
		if count > 0 {
			inv.Reason = fmt.Sprintf("NVML reports %d GPUs but none could be queried", count)
		}
	}
	return inv
}

// describeGPU queries device i. Name, memory and PCI address are required (without them the
// device cannot be chosen or matched); UUID and utilisation are informative only.
func describeGPU(lib nvml.Interface, i int) (GPU, error) {
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("GPU %d: get handle: %s", i, ret.Error())
	}
	g := GPU{Index: i}
	if g.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("GPU %d: get name: %s", i, ret.Error())
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("GPU %d (%s): get memory info: %s", i, g.Name, ret.Error())
	}
	g.TotalMemory, g.FreeMemory = mem.Total, mem.Free
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		return GPU{}, fmt.Errorf("GPU %d (%s): get PCI info: %s", i, g.Name, ret.Error())
	}
	addr, err := pciFromNVML(pci)
	if err != nil {
		return GPU{}, fmt.Errorf("GPU %d (%s): %w", i, g.Name, err)
	}
	g.PCI = addr
	if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
		g.UUID = uuid
	}
	if u, ret := dev.GetUtilizationRates(); ret == nvml.SUCCESS {
		g.UtilizationKnown, g.GPUUtilization, g.MemoryUtilization = true, u.Gpu, u.Memory
	}
	return g, nil
}

// pciFromNVML reads the bus ID string NVML fills in (the 32-byte one, else the legacy one).
func pciFromNVML(p nvml.PciInfo) (PCIAddress, error) {
	for _, raw := range [][]uint8{p.BusId[:], p.BusIdLegacy[:]} {
		if s := cString(raw); s != "" {
			return ParsePCIAddress(s)
		}
	}
	return PCIAddress{}, fmt.Errorf("%w: NVML returned an empty bus ID", ErrBadPCIAddress)
}

// cString returns the bytes of b before the first NUL.
func cString(b []uint8) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
