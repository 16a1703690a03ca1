package gen

import (
	"errors"
	"testing"
)

func TestConfigForParams(t *testing.T) {
	for _, target := range []int64{10_000, 30_000, 100_000, 1_000_000, 10_000_000, 100_000_000,
		250_000_000, 500_000_000, 1_000_000_000, 2_000_000_000} {
		c := ConfigForParams(target, 3e-6, 5)
		if err := c.validate(); err != nil {
			t.Errorf("%d: %+v: %v", target, c, err)
			continue
		}
		got := c.ParamCount()
		if ratio := float64(got) / float64(target); ratio < 0.8 || ratio > 1.25 {
			t.Errorf("%d: config %+v has %d parameters (%.2fx)", target, c, got, ratio)
		}
		if c.LR != 3e-6 || c.Seed != 5 || c.Shards != 1 {
			t.Errorf("%d: lr/seed/shards not carried: %+v", target, c)
		}
		if c.headDim()%8 != 0 && c.Hidden >= 256 {
			t.Errorf("%d: head dim %d", target, c.headDim())
		}
	}
	// Below the smallest shape it still returns a valid model.
	if err := ConfigForParams(10, 1e-6, 1).validate(); err != nil {
		t.Errorf("ConfigForParams(10): %v", err)
	}
}

func TestPresets(t *testing.T) {
	want := map[string]int64{"tiny": 7216, "small": 158016, "medium": 1262720}
	for name, params := range want {
		c, err := Preset(name, 1e-6, 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if c.ParamCount() != params {
			t.Errorf("%s: %d parameters, want %d", name, c.ParamCount(), params)
		}
	}
	if _, err := Preset("huge", 1e-6, 1); !errors.Is(err, ErrBadConfig) {
		t.Errorf("unknown preset: %v", err)
	}
}

func TestParseParamCount(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  error
	}{
		{"250M", 250_000_000, nil},
		{"250m", 250_000_000, nil},
		{"10K", 10_000, nil},
		{"1.5B", 1_500_000_000, nil},
		{"2G", 2_000_000_000, nil},
		{"123456", 123456, nil},
		{" 7M ", 7_000_000, nil},
		{"2e9", 2_000_000_000, nil},
		{"", 0, ErrBadParamCount},
		{"M", 0, ErrBadParamCount},
		{"-5M", 0, ErrBadParamCount},
		{"0", 0, ErrBadParamCount},
		{"NaN", 0, ErrBadParamCount},
		{"Inf", 0, ErrBadParamCount},
		{"5T", 0, ErrBadParamCount},
		{"9e99", 0, ErrBadParamCount},
		{"12MB", 0, ErrBadParamCount},
	}
	for _, tc := range tests {
		got, err := ParseParamCount(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("ParseParamCount(%q) = %d, %v; want %d, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func FuzzParseParamCount(f *testing.F) {
	for _, s := range []string{"250M", "1.5B", "10k", "0", "-1", "1e400", "NaN", "0x10", "1_000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseParamCount(s)
		if err != nil {
			if !errors.Is(err, ErrBadParamCount) || n != 0 {
				t.Fatalf("%q: %d, %v", s, n, err)
			}
			return
		}
		if n < 1 || n > maxParams {
			t.Fatalf("%q: %d out of range", s, n)
		}
		// Whatever parses gives a usable config.
		if err := ConfigForParams(n, 1e-6, 1).validate(); err != nil {
			t.Fatalf("%q: ConfigForParams(%d): %v", s, n, err)
		}
	})
}
