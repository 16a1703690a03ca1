package gen

import (
	"encoding/binary"
	"strconv"
)

// safetensorsHeader returns the opening of a safetensors file holding the tensors of group,
// in that order: the 8-byte little-endian header length, then the JSON header exactly as the
// Rust safetensors serializer (behind torch's save_file) writes it: compact, "__metadata__"
// first with {"format":"pt"}, then each tensor as {"dtype","shape","data_offsets"} in data
// order, padded with spaces to a multiple of 8 bytes so the data that follows is aligned.
func safetensorsHeader(lay *layout, group []int) []byte {
	b := make([]byte, 8, 8+64*len(group)+64)
	b = append(b, `{"__metadata__":{"format":"pt"}`...)
	var off int64
	for _, ti := range group {
		t := &lay.tensors[ti]
		// Tensor names are generated from a fixed ASCII alphabet: no JSON escaping needed.
		b = append(b, `,"`...)
		b = append(b, t.name...)
		b = append(b, `":{"dtype":"`...)
		b = append(b, t.dtype.String()...)
		b = append(b, `","shape":[`...)
		for d, n := range t.shape {
			if d > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, off, 10)
		b = append(b, ',')
		off += t.bytes()
		b = strconv.AppendInt(b, off, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for (len(b)-8)%8 != 0 {
		b = append(b, ' ')
	}
	binary.LittleEndian.PutUint64(b[:8], uint64(len(b)-8))
	return b
}

// safetensorsSize is the size of the whole file: header plus data.
func safetensorsSize(lay *layout, group []int, header []byte) int64 {
	n := int64(len(header))
	for _, ti := range group {
		n += lay.tensors[ti].bytes()
	}
	return n
}
