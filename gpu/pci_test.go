package gpu

import (
	"errors"
	"testing"
)

func TestParsePCIAddress(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want PCIAddress
		str  string
	}{
		{"00000000:18:00.0", PCIAddress{0, 0x18, 0, 0}, "0000:18:00.0"},
		{"0000:DB:1f.7", PCIAddress{0, 0xdb, 0x1f, 7}, "0000:db:1f.7"},
		{"65:00.0", PCIAddress{0, 0x65, 0, 0}, "0000:65:00.0"},
		{"0001:c1:00.1", PCIAddress{1, 0xc1, 0, 1}, "0001:c1:00.1"},
		{"ffffffff:ff:1f.7", PCIAddress{0xffffffff, 0xff, 0x1f, 7}, "ffffffff:ff:1f.7"},
		{" 0000:3a:00.0\n", PCIAddress{0, 0x3a, 0, 0}, "0000:3a:00.0"},
	} {
		got, err := ParsePCIAddress(tc.in)
		if err != nil || got != tc.want || got.String() != tc.str {
			t.Errorf("ParsePCIAddress(%q) = %+v (%s), %v; want %+v (%s)", tc.in, got, got, err, tc.want, tc.str)
		}
	}
	for _, in := range []string{
		"", "garbage", "18", "0000:18:00", "0000:18:20.0", "0000:18:00.8", "0000:100:00.0",
		"100000000:18:00.0", "0000:18:00.0.1", "0000:-1:00.0", "0000:+1:00.0", "0x00:18:00.0",
		"a:b:c:d.0", "0000::00.0", "0000:18:.0", "0000:18:00.",
	} {
		if got, err := ParsePCIAddress(in); !errors.Is(err, ErrBadPCIAddress) {
			t.Errorf("ParsePCIAddress(%q) = %+v, %v; want ErrBadPCIAddress", in, got, err)
		}
	}
}

// FuzzParsePCIAddress: no input panics, and whatever parses prints back to the same address.
func FuzzParsePCIAddress(f *testing.F) {
	for _, s := range []string{"00000000:18:00.0", "65:00.0", "0000:db:1f.7", "", ":::", "0000:18:00.8", "1:2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParsePCIAddress(s)
		if err != nil {
			if !errors.Is(err, ErrBadPCIAddress) {
				t.Fatalf("error %v does not wrap ErrBadPCIAddress", err)
			}
			return
		}
		if a.Bus > 0xff || a.Device > 0x1f || a.Function > 7 {
			t.Fatalf("%q parsed out of range: %+v", s, a)
		}
		back, err := ParsePCIAddress(a.String())
		if err != nil || back != a {
			t.Fatalf("%q -> %s -> %+v, %v", s, a, back, err)
		}
	})
}
