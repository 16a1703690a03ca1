//go:build !amd64 || purego

package sha256x2

import "unsafe"

const useKernel = false

// blocks2 is never called when useKernel is false; it is here to satisfy the compiler, and
// does what the kernel does.
func blocks2(ha *[8]uint32, pa *byte, hb *[8]uint32, pb *byte, n int) {
	blockGeneric(ha, unsafe.Slice(pa, n*BlockSize))
	blockGeneric(hb, unsafe.Slice(pb, n*BlockSize))
}
