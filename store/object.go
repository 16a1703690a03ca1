package store

import "github.com/weightfs/weightfs/store/format"

// Object files: their bytes (header, chunk table, trailer) are package store/format's
// (format/object.go; docs/format.md (Part I) has the layout). These names keep the rest of
// the package as it was.
const (
	objectHeaderLen  = format.ObjectHeaderLen
	objectTrailerLen = format.ObjectTrailerLen
	fullChunkSize    = format.FullChunkSize
	maxChunkSize     = format.MaxChunkSize
	chunkTableHead   = format.ChunkTableHead
)

type objectKind = format.ObjectKind

const (
	kindFull  = format.KindFull
	kindDelta = format.KindDelta
)

type (
	objectHeader = format.ObjectHeader
	chunkTable   = format.ChunkTable
)

func parseObjectHeader(b []byte, fileSize int64) (objectHeader, error) {
	return format.ParseObjectHeader(b, fileSize)
}

func chunkCount(contentLen, size int64) int64 { return format.ChunkCount(contentLen, size) }

func chunkTableLen(n int64) int64 { return format.ChunkTableLen(n) }

func encodeChunkTable(size int64, frameSizes []uint32) []byte {
	return format.EncodeChunkTable(size, frameSizes)
}

func readChunkTableHead(b []byte, h *objectHeader) (size, n int64, err error) {
	return format.ReadChunkTableHead(b, h)
}

func parseChunkSizes(b []byte, size, n int64, h *objectHeader) (chunkTable, error) {
	return format.ParseChunkSizes(b, size, n, h)
}
