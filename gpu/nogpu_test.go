//go:build !cgo

package gpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestNoGPUSupport: without cgo, auto runs the CPU diff and says why, gpu mode fails with
// ErrNoGPUSupport, and the report says it on every line that matters.
func TestNoGPUSupport(t *testing.T) {
	b, c, err := SelectWith(Options{Mode: ModeAuto})
	if err != nil || c.Backend != BackendCPU || !errors.Is(c.Err, ErrNoGPUSupport) {
		t.Fatalf("auto: %v, %+v", err, c)
	}
	if b.Name() != delta.NewCPUDiff().Name() {
		t.Fatalf("auto returned %s, want the CPU backend", b.Name())
	}
	if _, _, err := SelectWith(Options{Mode: ModeGPU}); !errors.Is(err, ErrNoGPUSupport) {
		t.Fatalf("gpu mode: %v, want ErrNoGPUSupport", err)
	}
	r := DiscoverWith(Options{}).String()
	for _, want := range []string{"NVML (libnvidia-ml.so.1): " + ErrNoGPUSupport.Error(), "--diff auto runs cpu: " + ErrNoGPUSupport.Error(), "--diff gpu fails: " + ErrNoGPUSupport.Error()} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
}
