package main

import (
	"os"
	"runtime"
)

// readerProcs gives a read-only mount twice as many of the runtime's Ps as cores, unless
// GOMAXPROCS says otherwise. Its request handlers and page builders block in reads of the
// disk (a rebuilt page reads the copy with O_DIRECT, which the kernel does not read ahead) and
// in writes to /dev/fuse, and a goroutine blocked in a system call keeps its P until the
// runtime's monitor takes it back, so with one P per core the cores sat idle a fifth of the
// time while pages waited to be built. Measured on 2 cores, cold reads of a version ten
// deltas behind: 723-823 -> 813-941 MiB/s; of the latest: unchanged.
func readerProcs() {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(2 * runtime.NumCPU())
}
