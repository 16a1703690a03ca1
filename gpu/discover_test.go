//go:build cgo

package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

const (
	missingNVML   = "libnvidia-ml-missing.so.1"
	missingOpenCL = "libOpenCL-missing.so.1"
)

func TestDiscoverDGXH100(t *testing.T) {
	free := [8]uint64{10 << 30, 70 << 30, 5 << 30, 79 << 30, 79 << 30, 1 << 30, 0, 40 << 30}
	inv := DiscoverNVML(newMockNVML(dgxH100(free), nvml.SUCCESS), "mock")
	if !inv.Loaded || len(inv.GPUs) != 8 || len(inv.Problems) != 0 {
		t.Fatalf("loaded %v, %d GPUs, problems %q", inv.Loaded, len(inv.GPUs), inv.Problems)
	}
	if inv.DriverVersion != "550.54.15" || inv.NVMLVersion != "12.550.54.15" {
		t.Errorf("versions %q %q", inv.DriverVersion, inv.NVMLVersion)
	}
	g := inv.GPUs[4]
	want := GPU{Index: 4, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-mock-4", PCI: PCIAddress{Bus: 0x9a},
		TotalMemory: 80 << 30, FreeMemory: 79 << 30, UtilizationKnown: true, GPUUtilization: 40, MemoryUtilization: 20}
	if g != want {
		t.Errorf("GPU 4 = %+v\nwant %+v", g, want)
	}
	best, ok := inv.MostFree()
	if !ok || best.Index != 3 { // 3 and 4 tie at 79 GiB: the lower index wins
		t.Errorf("MostFree = GPU %d, want 3", best.Index)
	}
	if best.PCI.String() != "0000:5d:00.0" {
		t.Errorf("GPU 3 PCI = %s", best.PCI)
	}
}

func TestDiscoverWithoutNVML(t *testing.T) {
	for _, tc := range []struct {
		name string
		lib  nvml.Interface
		want string
	}{
		{"library missing", nvml.New(nvml.WithLibraryPath(missingNVML)), "NVML library " + missingNVML + " not found"},
		{"driver not loaded", newMockNVML(nil, nvml.ERROR_DRIVER_NOT_LOADED), "did not initialise: ERROR_DRIVER_NOT_LOADED"},
		{"no devices", newMockNVML(nil, nvml.SUCCESS), "NVML reports no GPUs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := DiscoverNVML(tc.lib, missingNVML)
			if len(inv.GPUs) != 0 || !strings.Contains(inv.Reason, tc.want) {
				t.Fatalf("GPUs %d, reason %q, want it to contain %q", len(inv.GPUs), inv.Reason, tc.want)
			}
			if _, ok := inv.MostFree(); ok {
				t.Error("MostFree found a GPU in an empty inventory")
			}
		})
	}
}

func TestDiscoverSkipsBrokenDevices(t *testing.T) {
	gpus := dgxH100([8]uint64{1, 2, 3, 4, 5, 6, 7, 8})
	gpus[2].pciFails = true
	gpus[5].noUtilInfo = true
	gpus[6].busID = "garbage"
	inv := DiscoverNVML(newMockNVML(gpus, nvml.SUCCESS), "mock")
	if len(inv.GPUs) != 6 || len(inv.Problems) != 2 {
		t.Fatalf("%d GPUs, problems %q; want 6 and 2", len(inv.GPUs), inv.Problems)
	}
	if !strings.Contains(inv.Problems[0], "GPU 2") || !strings.Contains(inv.Problems[1], "malformed PCI bus ID") {
		t.Errorf("problems %q", inv.Problems)
	}
	for _, g := range inv.GPUs {
		if g.UtilizationKnown == (g.Index == 5) {
			t.Errorf("GPU %d: UtilizationKnown = %v", g.Index, g.UtilizationKnown)
		}
	}
}

func TestPlanDevice(t *testing.T) {
	const need, reserve = 28 << 20, 256 << 20
	free := [8]uint64{10 << 30, 70 << 30, 5 << 30, 79 << 30, 60 << 30, 1 << 30, 0, 40 << 30}
	dgx := DiscoverNVML(newMockNVML(dgxH100(free), nvml.SUCCESS), "mock")
	tight := DiscoverNVML(newMockNVML(dgxH100([8]uint64{100 << 20, 200 << 20}), nvml.SUCCESS), "mock")
	none := Inventory{Reason: "NVML library x not found"}
	// OpenCL lists the cards in another order than NVML: matching must use the PCI address.
	buses := []string{"db", "ba", "ab", "9a", "5d", "3a", "2a", "18"}
	var exact, byBus []CLDevice
	for _, b := range buses {
		exact = append(exact, clGPU("H100 at "+b, "0000:"+b+":00.0", true))
		byBus = append(byBus, clGPU("H100 at "+b, "0000:"+b+":00.0", false))
	}
	cl := func(devs ...CLDevice) OpenCLInventory {
		return OpenCLInventory{Library: "cl", Loaded: true, Devices: devs}
	}
	notLoaded := OpenCLInventory{Library: missingOpenCL, Reason: "cannot open"}
	otherGPU := CLDevice{Platform: "AMD", Name: "gfx90a", Type: "GPU", GlobalMemory: 64 << 30, MaxAlloc: 1 << 30,
		Available: true, Compiler: true, LittleEndian: true}

	for _, tc := range []struct {
		name       string
		mode       string
		nv         Inventory
		cl         OpenCLInventory
		wantDevice string // device name, when the plan succeeds
		wantErr    []error
		wantReason string
	}{
		{"most free GPU, exact PCI", ModeAuto, dgx, cl(exact...), "H100 at 5d", nil, "GPU 3 (NVIDIA H100 80GB HBM3, PCI 0000:5d:00.0, 79.0 GiB free"},
		{"most free GPU, NVIDIA bus id", ModeGPU, dgx, cl(byBus...), "H100 at 5d", nil, "most free memory"},
		{"PoCL beside the GPUs is ignored", ModeAuto, dgx, cl(append([]CLDevice{clPoCL()}, exact...)...), "H100 at 5d", nil, ""},
		{"no room on the most free GPU", ModeAuto, tight, cl(exact...), "", []error{ErrNoRoom}, ""},
		{"GPU not visible to OpenCL", ModeAuto, dgx, cl(exact[:4]...), "", []error{ErrNoDevice}, ""},
		{"GPU mode does not fall back to PoCL", ModeGPU, dgx, cl(clPoCL()), "", []error{ErrNoDevice}, ""},
		{"OpenCL missing", ModeGPU, dgx, notLoaded, "", []error{ErrNoOpenCL}, ""},
		{"auto without NVIDIA GPU", ModeAuto, none, cl(clPoCL()), "", []error{ErrNoGPU}, ""},
		{"gpu mode on PoCL", ModeGPU, none, cl(clPoCL()), "pthread-x86", nil, "a CPU, not a GPU"},
		{"gpu mode prefers an OpenCL GPU", ModeGPU, none, cl(clPoCL(), otherGPU), "gfx90a", nil, "--diff gpu uses OpenCL GPU device"},
		{"gpu mode, nothing at all", ModeGPU, none, notLoaded, "", []error{ErrNoGPU, ErrNoOpenCL}, ""},
		{"gpu mode, device unusable", ModeGPU, none, cl(CLDevice{Name: "old", Type: "CPU"}), "", []error{ErrNoGPU, ErrNoDevice}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := planDevice(tc.mode, tc.nv, tc.cl, need, reserve)
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("err = %v, want %v", err, want)
				}
			}
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if plan.device.Name != tc.wantDevice {
					t.Errorf("device %q, want %q", plan.device.Name, tc.wantDevice)
				}
				if !strings.Contains(plan.reason, tc.wantReason) {
					t.Errorf("reason %q does not contain %q", plan.reason, tc.wantReason)
				}
			}
		})
	}
}
