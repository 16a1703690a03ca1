//go:build cgo

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// go-nvml v0.13.0-1 ships mock.Interface and mock.Device (function-field mocks) and a DGX A100
// server built from them; that server needs github.com/google/uuid, which is not in this
// module's go.sum, so the tests build a DGX H100 the same way from the plain mocks.

// mockGPU describes one mocked device.
type mockGPU struct {
	name       string
	busID      string // as NVML writes it, "00000000:18:00.0"
	total      uint64
	free       uint64
	util       uint32
	pciFails   bool // GetPciInfo returns ERROR_UNKNOWN
	noUtilInfo bool // GetUtilizationRates returns ERROR_NOT_SUPPORTED
}

// dgxH100 is the 8-GPU layout of a DGX H100 (bus IDs as on the real machine) with the free
// memory given per GPU.
func dgxH100(free [8]uint64) []mockGPU {
	buses := [8]string{"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"}
	gpus := make([]mockGPU, 8)
	for i := range gpus {
		gpus[i] = mockGPU{
			name:  "NVIDIA H100 80GB HBM3",
			busID: "00000000:" + buses[i] + ":00.0",
			total: 80 << 30,
			free:  free[i],
			util:  uint32(10 * i),
		}
	}
	return gpus
}

// newMockNVML returns an nvml.Interface reporting gpus, or failing Init with initErr.
func newMockNVML(gpus []mockGPU, initErr nvml.Return) *mock.Interface {
	devices := make([]nvml.Device, len(gpus))
	for i, g := range gpus {
		devices[i] = &mock.Device{
			GetNameFunc: func() (string, nvml.Return) { return g.name, nvml.SUCCESS },
			GetUUIDFunc: func() (string, nvml.Return) { return fmt.Sprintf("GPU-mock-%d", i), nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: g.total, Free: g.free, Used: g.total - g.free}, nvml.SUCCESS
			},
			GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
				if g.noUtilInfo {
					return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
				}
				return nvml.Utilization{Gpu: g.util, Memory: g.util / 2}, nvml.SUCCESS
			},
			GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
				if g.pciFails {
					return nvml.PciInfo{}, nvml.ERROR_UNKNOWN
				}
				var p nvml.PciInfo
				copy(p.BusId[:], g.busID)
				return p, nvml.SUCCESS
			},
		}
	}
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return initErr },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
		SystemGetNVMLVersionFunc:   func() (string, nvml.Return) { return "12.550.54.15", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devices), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devices) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devices[i], nvml.SUCCESS
		},
	}
}

// clGPU is an OpenCL GPU device as NVIDIA's driver would report it; exact selects
// cl_khr_pci_bus_info (all four fields) over the older bus/slot query.
func clGPU(name, pci string, exact bool) CLDevice {
	a, err := ParsePCIAddress(pci)
	if err != nil {
		panic(err) // test fixture with a literal address
	}
	if !exact {
		a.Device, a.Function = 0x1f, 7 // the slot encoding varies; matching must not rely on it
	}
	return CLDevice{
		Platform: "NVIDIA CUDA", Name: name, Type: "GPU",
		GlobalMemory: 80 << 30, MaxAlloc: 20 << 30, MaxWorkGroup: 1024,
		Available: true, Compiler: true, LittleEndian: true,
		PCIKnown: true, PCIExact: exact, PCI: a,
	}
}

// clPoCL is a PoCL CPU device.
func clPoCL() CLDevice {
	return CLDevice{
		Platform: "Portable Computing Language", Name: "pthread-x86", Type: "CPU",
		GlobalMemory: 4 << 30, MaxAlloc: 1 << 30, MaxWorkGroup: 4096,
		Available: true, Compiler: true, LittleEndian: true,
	}
}
