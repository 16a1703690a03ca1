package gen

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// stTensor is one tensor as a test reads it back from a safetensors file.
type stTensor struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

var errBadFile = errors.New("bad safetensors file")

// parseSafetensors is a strict test-only reader: it checks everything the format and
// save_pretrained promise (length prefix, padding, metadata, contiguous offsets, file size) and
// returns the tensors' raw bytes by name and the names in header order.
func parseSafetensors(b []byte) (map[string][]byte, []string, error) {
	if len(b) < 8 {
		return nil, nil, fmt.Errorf("%w: %d bytes", errBadFile, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 || n > uint64(len(b)-8) {
		return nil, nil, fmt.Errorf("%w: header length %d", errBadFile, n)
	}
	js := b[8 : 8+n]
	trimmed := strings.TrimRight(string(js), " ")
	if len(js)-len(trimmed) >= 8 {
		return nil, nil, fmt.Errorf("%w: %d bytes of padding", errBadFile, len(js)-len(trimmed))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(trimmed), &raw); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errBadFile, err)
	}
	// Key order: decode token by token.
	dec := json.NewDecoder(strings.NewReader(trimmed))
	var order []string
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		order = append(order, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, nil, err
		}
	}
	if len(order) == 0 || order[0] != "__metadata__" || string(raw["__metadata__"]) != `{"format":"pt"}` {
		return nil, nil, fmt.Errorf("%w: metadata is not first or not {\"format\":\"pt\"}", errBadFile)
	}
	data := b[8+n:]
	out := map[string][]byte{}
	var next int64
	for _, name := range order[1:] {
		var t stTensor
		if err := json.Unmarshal(raw[name], &t); err != nil {
			return nil, nil, fmt.Errorf("%w: %s: %v", errBadFile, name, err)
		}
		numel := int64(1)
		for _, d := range t.Shape {
			numel *= d
		}
		if t.DType != "BF16" || t.DataOffsets[0] != next || t.DataOffsets[1]-t.DataOffsets[0] != 2*numel {
			return nil, nil, fmt.Errorf("%w: %s: %+v not contiguous at %d", errBadFile, name, t, next)
		}
		next = t.DataOffsets[1]
		out[name] = data[t.DataOffsets[0]:t.DataOffsets[1]]
	}
	if next != int64(len(data)) {
		return nil, nil, fmt.Errorf("%w: data is %d bytes, tensors end at %d", errBadFile, len(data), next)
	}
	return out, order[1:], nil
}

// checkpointTensors parses every safetensors file of a checkpoint.
func checkpointTensors(t testing.TB, files map[string][]byte) map[string][]byte {
	t.Helper()
	all := map[string][]byte{}
	for name, b := range files {
		if !strings.HasSuffix(name, ".safetensors") {
			continue
		}
		tensors, _, err := parseSafetensors(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for k, v := range tensors {
			all[k] = v
		}
	}
	return all
}

// filesDigest is one SHA-256 over the sorted file names and contents.
func filesDigest(files map[string][]byte) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s %d\n", n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func mustPreset(t testing.TB, name string, lr float64, seed uint64) Config {
	t.Helper()
	c, err := Preset(name, lr, seed)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
