//go:build !amd64 || purego

package delta

import "unsafe"

const haveMaskKernel16 = false

// changedMask16 is never called without the kernel; it does what the kernel does.
func changedMask16(base, cur *byte, groups int, mask *uint64) {
	n := groups * maskGroupElems * 2
	changedMaskGo(unsafe.Slice(base, n), unsafe.Slice(cur, n), 2, unsafe.Slice(mask, groups))
}
