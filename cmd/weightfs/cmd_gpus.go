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
	asJSON := fs.Bool("json", false, "print one JSON object instead of the report (docs/cli.md):\n"+
		`{"gpu_support", "nvml": {"library", "loaded", "reason", "driver_version", "nvml_version", "gpus": [...], "problems"},`+"\n"+
		`"opencl": {"library", "loaded", "reason", "devices": [...], "problems"}, "auto": {"backend", "device", "reason"},`+"\n"+
		`"gpu_mode", "chunk_bytes", "memory_needed"}`)
	if _, err := parse(e, fs, args, 0, 0); err != nil {
		return err
	}
	// The report names the GPUs, the OpenCL devices, and what --diff auto and --diff gpu run.
	r := gpu.DiscoverWith(gpuOptions(""))
	if *asJSON {
		return writeJSON(e.stdout, newGPUsJSON(r))
	}
	fmt.Fprint(e.stdout, r.String())
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
	opts := gpuOptions(mode)
	// Each step of the choice (NVML, OpenCL, the plan) at debug; the choice itself at info.
	opts.Logf = func(format string, args ...any) { e.log.Debug(fmt.Sprintf(format, args...)) }
	backend, choice, err := gpu.SelectWith(opts)
	if err != nil {
		return nil, fmt.Errorf("--diff %s: %w", mode, err)
	}
	if mode != "cpu" {
		e.log.Info("diff backend: "+choice.Backend, "reason", choice.Reason)
	}
	return backend, nil
}
