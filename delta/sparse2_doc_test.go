package delta

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// docExample2Hex is the version-2 worked example of docs/format.md (Part II): the step after
// the version-1 example, coded against it. If the encoder's output changes, the document must
// change with it; TestFormatDocExample2 also finds the string in the document.
const docExample2Hex = "574653440202011410000000000000000400000000000000040000001b00000003c1f42ae702010101000203030420c21500010000010200020201"

// docExample2Tensor is the tensor one step after the version-1 example's new tensor.
func docExample2Tensor() []byte {
	_, cur := docExampleTensors()
	next := bytes.Clone(cur)
	binary.LittleEndian.PutUint16(next[2*2:], 0x3CA6)  // +1 ULP again, as in the context
	binary.LittleEndian.PutUint16(next[2*7:], 0x0001)  // +0 -> the smallest subnormal: +1 ULP
	binary.LittleEndian.PutUint16(next[2*11:], 0x3E81) // +129 ULP, the context's was +128
	binary.LittleEndian.PutUint16(next[2*14:], 0x8001) // -0 -> -1 ULP
	return next
}

func TestFormatDocExample2(t *testing.T) {
	_, cur := docExampleTensors()
	next := docExample2Tensor()
	ctxBody, err := hex.DecodeString(docExampleHex)
	if err != nil {
		t.Fatal(err)
	}
	ctxDelta, err := OpenDelta(ctxBody)
	if err != nil {
		t.Fatal(err)
	}
	enc := NewDeltaEncoder(2, true, 16)
	enc.SetContext(ctxDelta.AsContext())
	if _, err := enc.AddDiff(0, cur, next); err != nil {
		t.Fatal(err)
	}
	body, err := enc.Finish()
	if err != nil {
		t.Fatal(err)
	}
	got := hex.EncodeToString(body)
	if got != docExample2Hex {
		t.Fatalf("body\n got %s\nwant %s", got, docExample2Hex)
	}
	doc, err := os.ReadFile("../docs/format.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "\n"+docExample2Hex+"\n") {
		t.Fatal("docs/format.md does not show the version-2 example's hex string on a line of its own")
	}
	dst := bytes.Clone(cur)
	if err := ApplyDeltaContext(body, ctxDelta.AsContext(), dst, 0, Forward); err != nil || !bytes.Equal(dst, next) {
		t.Fatalf("example does not apply: %v", err)
	}
	if err := ApplyDeltaContext(body, ctxDelta.AsContext(), dst, 0, Backward); err != nil || !bytes.Equal(dst, cur) {
		t.Fatalf("example does not apply backward: %v", err)
	}
}
