package xxh3s

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

var hasAVX2 = cpu.X86.HasAVX2

// accumBlockAVX2 accumulates the 16 stripes of one block of data and scrambles (zeebo/xxh3's).
//
//go:noescape
func accumBlockAVX2(acc *[8]uint64, data, key unsafe.Pointer)

// blocks accumulates whole blocks of p (len(p) a multiple of 1024), scrambling after each.
func blocks(acc *[8]uint64, p []byte) {
	if !hasAVX2 {
		blocksGeneric(acc, p)
		return
	}
	for ; len(p) >= block; p = p[block:] {
		accumBlockAVX2(acc, unsafe.Pointer(&p[0]), unsafe.Pointer(&secret[0]))
	}
}
