//go:build amd64 && !purego

package delta

import "golang.org/x/sys/cpu"

var haveMaskKernel16 = cpu.X86.HasAVX2

// changedMask16 is changedMask for 2-byte elements with AVX2: groups mask words from the
// 128*groups bytes at base and cur (changedmask_amd64.s).
//
//go:noescape
func changedMask16(base, cur *byte, groups int, mask *uint64)
