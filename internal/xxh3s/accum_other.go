//go:build !amd64

package xxh3s

// blocks accumulates whole blocks of p (len(p) a multiple of 1024), scrambling after each.
func blocks(acc *[8]uint64, p []byte) { blocksGeneric(acc, p) }

var hasAVX2 = false
