package store

import (
	"encoding/binary"
	"encoding/json"

	"github.com/weightfs/weightfs/delta"
)

// A stream must tell a safetensors file from any other file from its first bytes, before it
// knows the file's size; the batch path (ingest.go) decides with the size known. The stream's
// classification is therefore provisional and is checked against the batch rule
// (delta.ParseHeader with the final size) when the stream closes; streamClass says what is
// known so far.
type streamClass int

const (
	// classUndecided: fewer bytes than the header needs have arrived.
	classUndecided streamClass = iota
	// classSafetensors: the header parses for the size its tensors imply; the file is
	// safetensors if it ends exactly there.
	classSafetensors
	// classBlob: no size makes the file valid safetensors (its header length is out of range).
	classBlob
	// classBlobUnsure: the header does not parse for the size its tensors seem to imply; the
	// final size is checked against the batch rule at the close.
	classBlobUnsure
)

// headerNeed returns how many leading bytes decide the class of a file starting with prefix:
// 8 for the header length, then 8+N. It returns -1 when the class is already known to be a
// blob (a header length above delta.MaxHeaderLen fails for every file size).
func headerNeed(prefix []byte) int64 {
	if len(prefix) < 8 {
		return 8
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n > delta.MaxHeaderLen {
		return -1
	}
	return 8 + int64(n)
}

// classifyHeader decides the class of a file whose first headerNeed bytes are prefix. For a
// safetensors file it returns the parsed header and the file size it implies. The header is
// parsed once (delta.ParseHeaderAnySize); classifyHeaderReference, which guesses the size
// with encoding/json and then parses for it, is the definition it must agree with
// (TestClassifyHeaderMatchesReference, FuzzClassifyHeader).
func classifyHeader(prefix []byte) (streamClass, *delta.Header, int64) {
	need := headerNeed(prefix)
	if need < 0 {
		return classBlob, nil, 0
	}
	hdr, size, err := delta.ParseHeaderAnySize(prefix[:need])
	if err != nil {
		return classBlobUnsure, nil, 0
	}
	return classSafetensors, hdr, size
}

// classifyHeaderReference is classifyHeader as it was: the size guessed from the offsets
// (impliedDataLen), then the header parsed and checked for that size.
func classifyHeaderReference(prefix []byte) (streamClass, *delta.Header, int64) {
	need := headerNeed(prefix)
	if need < 0 {
		return classBlob, nil, 0
	}
	dataLen, ok := impliedDataLen(prefix[8:need])
	if !ok {
		return classBlobUnsure, nil, 0
	}
	size := need + dataLen
	hdr, err := delta.ParseHeader(prefix[:need], size)
	if err != nil {
		return classBlobUnsure, nil, 0
	}
	return classSafetensors, hdr, size
}

// impliedDataLen reads the largest end offset of the tensors of a safetensors JSON header: the
// length its data section must have. It only guesses the size to validate the header with;
// delta.ParseHeader does the validation.
func impliedDataLen(js []byte) (int64, bool) {
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(js, &entries); err != nil {
		return 0, false
	}
	var end int64
	for name, raw := range entries {
		if name == "__metadata__" {
			continue
		}
		var t struct {
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &t); err != nil || len(t.Offsets) != 2 || t.Offsets[1] < 0 {
			return 0, false
		}
		end = max(end, t.Offsets[1])
	}
	return end, true
}

// batchIsSafetensors reports whether the batch path would ingest a file of size bytes that
// starts with prefix as safetensors (prefix holds at least headerNeed bytes, or the whole
// file).
func batchIsSafetensors(prefix []byte, size int64) bool {
	need := headerNeed(prefix)
	if need < 0 || int64(len(prefix)) < need || size < need {
		return false
	}
	_, err := delta.ParseHeader(prefix[:need], size)
	return err == nil
}
