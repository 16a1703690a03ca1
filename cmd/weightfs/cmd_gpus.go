package main

import (
	"fmt"
	"os"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gpu"
)

// The GPU libraries are found by their usual sonames; these variables name others (a name
// that does not exist simulates a machine without them).
const (
	envNVMLLibrary   = "WEIGHTFS_NVML_LIBRARY"
	envOpenCLLibrary = "WEIGHTFS_OPENCL_LIBRARY"
)

func gpuOptions(mode string) gpu.Options {
	return gpu.Options{Mode: mode, NVMLLibrary: os.Getenv(envNVMLLibrary), OpenCLLibrary: os.Getenv(envOpenCLLibrary)}
}

func cmdGPUs(e *env, args []string) error {
	fs := newFlags("gpus")
	if _, err := parse(e, fs, args, 0, 0); err != nil {
		return err
	}
	// The report names the GPUs, the OpenCL devices, and what --diff auto and --diff gpu run.
	fmt.Fprint(e.stdout, gpu.DiscoverWith(gpuOptions("")).String())
	return nil
}

// selectDiff picks the diff backend for --diff and logs the reason. The caller releases the
// backend with gpu.CloseBackend when done.
func selectDiff(e *env, mode string) (delta.DiffBackend, error) {
	switch mode {
	case "auto", "cpu", "gpu":
	default:
		return nil, usagef("--diff must be auto, cpu or gpu, not %q", mode)
	}
	backend, choice, err := gpu.SelectWith(gpuOptions(mode))
	if err != nil {
		return nil, fmt.Errorf("--diff %s: %w", mode, err)
	}
	if mode != "cpu" {
		logTo(e)("diff backend: %s (%s)", choice.Backend, choice.Reason)
	}
	return backend, nil
}
