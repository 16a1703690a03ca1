package delta

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"testing"
)

// docExampleHex is the worked example of docs/format.md (Part II): a 16-element bf16 tensor with
// 3 changes. If the encoder's output changes, the document must change with it.
const docExampleHex = "5746534401020114" + // magic, version 1, width 2, flags float, shift 20
	"1000000000000000" + // 16 elements
	"0300000000000000" + // 3 changed
	"0300000009000000" + // block 0: 3 changes, 9 bytes
	"00" + "02" + "03" + // raw symbols, 2 position bytes, 3 symbol bytes
	"4161" + // Rice: k=1; gaps 2, 0, 7
	"0201ff" + // symbols: +1, -1, escape
	"01" // escape: code 255+1 = 256 (+128 ULP)

func docExampleTensors() (base, cur []byte) {
	values := []uint16{
		0x3C23, 0xBC8F, 0x3CA4, 0xBBF5, 0x3D01, 0xBD12, 0x3B80, 0x0000,
		0x3C9A, 0xBCCD, 0x3A00, 0x3D80, 0xBC00, 0x3C00, 0x8000, 0x3BE6,
	}
	base = make([]byte, 2*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint16(base[2*i:], v)
	}
	cur = bytes.Clone(base)
	binary.LittleEndian.PutUint16(cur[2*2:], 0x3CA5)  // 0.02002 -> next larger: +1 ULP
	binary.LittleEndian.PutUint16(cur[2*3:], 0xBBF6)  // -0.00748 -> next smaller: -1 ULP
	binary.LittleEndian.PutUint16(cur[2*11:], 0x3E00) // 0.0625 -> 0.125: +128 ULP
	return base, cur
}

func TestFormatDocExample(t *testing.T) {
	base, cur := docExampleTensors()
	body, err := EncodeDelta(nil, base, cur, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(body); got != docExampleHex {
		t.Fatalf("body\n got %s\nwant %s", got, docExampleHex)
	}
	dst := bytes.Clone(base)
	if err := ApplyDelta(body, dst, 0, Forward); err != nil || !bytes.Equal(dst, cur) {
		t.Fatalf("example does not apply: %v", err)
	}
}
