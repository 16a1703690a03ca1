package main

import (
	"fmt"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gpu"
)

func cmdGPUs(e *env, args []string) error {
	fs := newFlags("gpus")
	if _, err := parse(e, fs, args, 0, 0); err != nil {
		return err
	}
	// The report names the GPUs, the OpenCL devices, and what --diff auto and --diff gpu run.
	fmt.Fprint(e.stdout, gpu.Discover().String())
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
	backend, choice, err := gpu.Select(mode, logTo(e))
	if err != nil {
		return nil, fmt.Errorf("--diff %s: %w", mode, err)
	}
	if mode != "cpu" {
		logTo(e)("diff backend: %s (%s)", choice.Backend, choice.Reason)
	}
	return backend, nil
}
