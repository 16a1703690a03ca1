package main

import (
	"log/slog"
	"os"
	"syscall"
)

// failpointEnv names a store failpoint (store/failpoints.go) at which the daemon kills itself
// with SIGKILL: a crash drill, and the tests' way to kill a process at a point they can name
// (a publisher that dies with the manifest written, or before).
const failpointEnv = "WEIGHTFS_FAILPOINT"

// failpointFromEnv is the store's failpoint hook that $WEIGHTFS_FAILPOINT asks for (nil: none).
func failpointFromEnv(log *slog.Logger) func(string) error {
	want := os.Getenv(failpointEnv)
	if want == "" {
		return nil
	}
	log.Warn("crash drill: this process kills itself at a store failpoint", "env", failpointEnv, "point", want)
	return func(point string) error {
		if point == want {
			log.Warn("crash drill: killed at failpoint", "point", point)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // SIGKILL is not caught: nothing runs after
		}
		return nil
	}
}
