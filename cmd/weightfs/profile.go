package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profileEnv names a file to write a CPU profile of the whole command to (go tool pprof): how
// the figures in docs/benchmarks.md were explained, e.g. of a mount under `make bench`.
const profileEnv = "WEIGHTFS_CPUPROFILE"

// startProfile starts the CPU profile profileEnv asks for; the returned function stops it.
func startProfile(e *env) func() {
	path := os.Getenv(profileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "weightfs: %s=%s: %v (no profile)\n", profileEnv, path, err)
		if f != nil {
			f.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
