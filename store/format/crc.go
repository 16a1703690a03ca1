package format

import "hash/crc32"

// castagnoli is the CRC-32C table every checksum of the format uses; the standard library
// uses the SSE4.2 instruction for it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C is the checksum of the format's trailers: CRC-32C (Castagnoli) of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }
