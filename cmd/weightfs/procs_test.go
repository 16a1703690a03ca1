package main

import (
	"runtime"
	"testing"
)

func TestMountProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(1)
	mountProcs()
	if got, want := runtime.GOMAXPROCS(0), 2*runtime.NumCPU(); got != want {
		t.Fatalf("GOMAXPROCS %d, want %d", got, want)
	}
	t.Setenv("GOMAXPROCS", "1")
	runtime.GOMAXPROCS(1)
	mountProcs()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("GOMAXPROCS=1 in the environment: %d, want 1", got)
	}
}
