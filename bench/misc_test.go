package main

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

func TestKernelInput(t *testing.T) {
	base, cur, changed := kernelInput(1<<20, 0.02, 1)
	var out delta.Changes
	if err := delta.ReferenceDiff(base, cur, 2, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Index) != changed {
		t.Fatalf("%d elements differ, kernelInput says %d", len(out.Index), changed)
	}
	density := float64(changed) / float64(len(base)/2)
	if math.Abs(density-0.02) > 0.002 {
		t.Fatalf("density %.4f, want about 0.02", density)
	}
	// The same seed gives the same bytes; the CPU backend agrees with the reference.
	base2, cur2, _ := kernelInput(1<<20, 0.02, 1)
	if string(base) != string(base2) || string(cur) != string(cur2) {
		t.Fatal("kernelInput is not deterministic")
	}
	var fast delta.Changes
	if err := delta.NewCPUDiff().Diff(base, cur, 2, &fast); err != nil || len(fast.Index) != changed {
		t.Fatalf("cpu diff: %d changes, %v", len(fast.Index), err)
	}
}

func TestConfigForBytes(t *testing.T) {
	for _, n := range []int64{1 << 20, 40 << 20, 500_000_000} {
		c, err := configForBytes(n, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		if 2*c.ParamCount() < n || 2*c.ParamCount() > n+n/2 {
			t.Errorf("configForBytes(%d) gives %d bytes of weights", n, 2*c.ParamCount())
		}
		if c.LR != 1e-6 {
			t.Errorf("lr %g", c.LR)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %g, want %g", tc.in, got, tc.want)
		}
	}
}

func TestCleanerRunsNewestFirstAndOnce(t *testing.T) {
	var log strings.Builder
	c := newCleaner(&log)
	var order []string
	first := c.add("first", func() error { order = append(order, "first"); return nil })
	c.add("second", func() error { order = append(order, "second"); return errors.New("it failed") })
	c.add("third", func() error { order = append(order, "third"); return nil })
	if err := first(); err != nil {
		t.Fatal(err)
	}
	if err := first(); err != nil { // already ran
		t.Fatal(err)
	}
	c.runAll()
	if strings.Join(order, ",") != "first,third,second" {
		t.Fatalf("order %v", order)
	}
	if !strings.Contains(log.String(), "second") || !strings.Contains(log.String(), "it failed") {
		t.Fatalf("failure not reported: %q", log.String())
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{5: "5 B", 2048: "2.0 KiB", 3 << 20: "3.0 MiB", 5 << 29: "2.50 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestMachineParsers(t *testing.T) {
	if got := cpuModel([]byte("processor\t: 0\nmodel name\t: Test CPU @ 2GHz\n")); got != "Test CPU @ 2GHz" {
		t.Errorf("cpuModel = %q", got)
	}
	if got := fsTypeName(0x01021994); got != "tmpfs" {
		t.Errorf("fsTypeName(tmpfs) = %q", got)
	}
	if _, err := freeBytes(os.TempDir()); err != nil {
		t.Error(err)
	}
}
