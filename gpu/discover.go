package gpu

// DefaultNVMLLibrary is the NVML library opened when Options.NVMLLibrary is empty.
const DefaultNVMLLibrary = "libnvidia-ml.so.1"

// GPU is one NVIDIA GPU as NVML reports it.
type GPU struct {
	Index       int
	Name        string
	UUID        string
	PCI         PCIAddress
	TotalMemory uint64 // bytes
	FreeMemory  uint64 // bytes
	// UtilizationKnown is false where the device does not report utilisation; otherwise
	// GPUUtilization and MemoryUtilization are percentages over NVML's last sample period.
	UtilizationKnown  bool
	GPUUtilization    uint32
	MemoryUtilization uint32
}

// Inventory is what NVML reported. A machine without NVML is an Inventory with no GPUs and a
// Reason, not an error: it simply has no NVIDIA GPU to offer.
type Inventory struct {
	Library       string // the NVML library that was asked for
	Loaded        bool   // NVML was found and initialised
	Reason        string // why GPUs is empty, when it is
	DriverVersion string
	NVMLVersion   string
	GPUs          []GPU
	// Problems lists devices left out because a query failed, one sentence each.
	Problems []string
}

// MostFree returns the GPU with the most free memory (the lowest index among equals).
func (inv Inventory) MostFree() (GPU, bool) {
	if len(inv.GPUs) == 0 {
		return GPU{}, false
	}
	best := inv.GPUs[0]
	for _, g := range inv.GPUs[1:] {
		if g.FreeMemory > best.FreeMemory {
			best = g
		}
	}
	return best, true
}
