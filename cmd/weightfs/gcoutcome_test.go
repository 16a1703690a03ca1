package main

import (
	"strings"
	"testing"
)

// TestGCOutcome: gc and gc --dry-run say that the store grows, and by how much, when
// re-anchoring adds more than the drop deletes; never "frees -N bytes".
func TestGCOutcome(t *testing.T) {
	for _, tc := range []struct {
		freed int64
		dry   bool
		want  string
	}{
		{-39174192, true, "the store grows by at most 37.4 MiB (39174192 bytes): re-anchoring writes whole copies"},
		{-39174192, false, "the store grew by 37.4 MiB (39174192 bytes): re-anchoring writes whole copies"},
		{2 << 20, true, "frees at least 2.0 MiB (2097152 bytes)"},
		{2 << 20, false, "the store shrank by 2.0 MiB (2097152 bytes)"},
		{0, true, "frees at least 0 B (0 bytes)"},
	} {
		got := gcOutcome(tc.freed, tc.dry)
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, "-3") || strings.Contains(got, "-2") {
			t.Errorf("gcOutcome(%d, %v) = %q, want %q...", tc.freed, tc.dry, got, tc.want)
		}
	}
}
