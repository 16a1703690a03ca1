package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// PCIAddress is a PCI function address, domain:bus:device.function. NVML names a GPU by it and
// OpenCL reports it per device (cl_khr_pci_bus_info, or NVIDIA's cl_nv_device_attribute_query),
// which is how the two views of the same card are matched.
type PCIAddress struct {
	Domain   uint32
	Bus      uint32
	Device   uint32
	Function uint32
}

// String formats a as lower-case "dddd:bb:dd.f" (eight domain digits if the domain needs them).
func (a PCIAddress) String() string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", a.Domain, a.Bus, a.Device, a.Function)
}

// ParsePCIAddress parses "[domain:]bus:device.function" in hexadecimal, as NVML writes it
// ("00000000:65:00.0") or lspci does ("0000:65:00.0", "65:00.0"). Bounds are those of PCI:
// bus <= 0xff, device <= 0x1f, function <= 7.
func ParsePCIAddress(s string) (PCIAddress, error) {
	bad := func(why string) (PCIAddress, error) {
		return PCIAddress{}, fmt.Errorf("%w %q: %s", ErrBadPCIAddress, s, why)
	}
	parts := strings.Split(strings.TrimSpace(s), ":")
	var a PCIAddress
	switch len(parts) {
	case 3:
		d, err := parseHexField(parts[0], 8, 0xffffffff)
		if err != nil {
			return bad("domain " + err.Error())
		}
		a.Domain = d
		parts = parts[1:]
	case 2:
	default:
		return bad("want [domain:]bus:device.function")
	}
	bus, err := parseHexField(parts[0], 2, 0xff)
	if err != nil {
		return bad("bus " + err.Error())
	}
	dev, fn, ok := strings.Cut(parts[1], ".")
	if !ok {
		return bad("no '.' before the function number")
	}
	device, err := parseHexField(dev, 2, 0x1f)
	if err != nil {
		return bad("device " + err.Error())
	}
	function, err := parseHexField(fn, 1, 7)
	if err != nil {
		return bad("function " + err.Error())
	}
	a.Bus, a.Device, a.Function = bus, device, function
	return a, nil
}

// parseHexField parses 1..maxDigits hexadecimal digits (no sign, no prefix) not above limit.
func parseHexField(s string, maxDigits int, limit uint64) (uint32, error) {
	if len(s) == 0 || len(s) > maxDigits {
		return 0, fmt.Errorf("%q: want 1 to %d hex digits", s, maxDigits)
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return 0, fmt.Errorf("%q: not hexadecimal", s)
		}
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || v > limit {
		return 0, fmt.Errorf("%q: above %#x", s, limit)
	}
	return uint32(v), nil
}
