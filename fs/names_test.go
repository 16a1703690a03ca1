package fs

import (
	"errors"
	"testing"
)

func TestParseVersionName(t *testing.T) {
	tests := []struct {
		name    string
		v       uint64
		isVer   bool
		wantErr bool
	}{
		{"weight_v000001", 1, true, false},
		{"weight_v000043", 43, true, false},
		{"weight_v999999", 999999, true, false},
		{"weight_v1000000", 1000000, true, false},
		{"weight_v", 0, true, true},
		{"weight_v000000", 0, true, true},
		{"weight_v1", 0, true, true},
		{"weight_v0000001", 0, true, true},
		{"weight_v00000x", 0, true, true},
		{"weight_v-00001", 0, true, true},
		{"weight_v99999999999999999999999", 0, true, true},
		{"staging", 0, false, false},
		{"Weight_v000001", 0, false, false},
		{"latest", 0, false, false},
		{"", 0, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, isVer, err := ParseVersionName(tc.name)
			if v != tc.v || isVer != tc.isVer || (err != nil) != tc.wantErr {
				t.Fatalf("ParseVersionName(%q) = %d, %v, %v; want %d, %v, err %v", tc.name, v, isVer, err, tc.v, tc.isVer, tc.wantErr)
			}
			if err != nil && !errors.Is(err, errBadVersionName) {
				t.Fatalf("error %v does not wrap errBadVersionName", err)
			}
		})
	}
}

func TestVersionName(t *testing.T) {
	for v, want := range map[uint64]string{1: "weight_v000001", 43: "weight_v000043", 1234567: "weight_v1234567"} {
		if got := VersionName(v); got != want {
			t.Errorf("VersionName(%d) = %q, want %q", v, got, want)
		}
	}
}

// FuzzParseVersionName checks that a name is accepted exactly when it is the canonical name
// of its number, and never panics.
func FuzzParseVersionName(f *testing.F) {
	for _, s := range []string{"weight_v000001", "weight_v1", "weight_v", "x", "weight_v0000000000000000000001", "weight_v18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		v, isVer, err := ParseVersionName(name)
		if err != nil {
			if !isVer {
				t.Fatalf("%q: error for a name that is not version-like", name)
			}
			return
		}
		if isVer && VersionName(v) != name {
			t.Fatalf("%q accepted as %d, whose name is %q", name, v, VersionName(v))
		}
		if isVer && v == 0 {
			t.Fatalf("%q accepted as version 0", name)
		}
	})
}
