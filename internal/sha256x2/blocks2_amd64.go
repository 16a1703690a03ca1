//go:build amd64 && !purego

package sha256x2

import "golang.org/x/sys/cpu"

// useKernel: the SHA extensions and the SSE levels blocks2 uses. AVX2 stands for CPUID leaf 7
// existing, which cpuidSHA reads.
var useKernel = cpu.X86.HasSSSE3 && cpu.X86.HasSSE41 && cpu.X86.HasAVX2 && cpuidSHA()

// blocks2 hashes n blocks at pa into ha and n blocks at pb into hb (blocks2_amd64.s).
//
//go:noescape
func blocks2(ha *[8]uint32, pa *byte, hb *[8]uint32, pb *byte, n int)

func cpuidSHA() bool
