package s3

import (
	"bytes"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/testfiles"
	"github.com/weightfs/weightfs/store"
)

// Test helpers for stores in S3, as store's own tests have them (store/helpers_test.go).

// testTensor is a tensor of a handmade safetensors file.
type testTensor struct {
	name  string
	dtype delta.DType
	shape []int64
	data  []byte
}

// safetensorsFile builds a valid safetensors file.
func safetensorsFile(t testing.TB, tensors ...testTensor) []byte {
	t.Helper()
	hdrTensors := make([]delta.Tensor, len(tensors))
	for i, tt := range tensors {
		hdrTensors[i] = delta.Tensor{Name: tt.name, DType: tt.dtype, Shape: tt.shape}
	}
	hdr, err := delta.EncodeHeader(nil, hdrTensors)
	if err != nil {
		t.Fatalf("encode header: %v", err)
	}
	out := append([]byte(nil), hdr...)
	for _, tt := range tensors {
		out = append(out, tt.data...)
	}
	return out
}

// The bytes tests commit (internal/testfiles, shared with the other store package's tests).
var (
	randomBytes = testfiles.RandomBytes
	bf16Like    = testfiles.BF16Like
	perturb     = testfiles.Perturb
	writeTree   = testfiles.WriteTree
)

func commitTree(t testing.TB, s *store.Store, v uint64, files map[string][]byte) (store.VersionInfo, string) {
	t.Helper()
	dir := writeTree(t, t.TempDir(), files)
	info, err := s.Commit(dir, store.CommitOptions{Version: v})
	if err != nil {
		t.Fatalf("commit version %d: %v", v, err)
	}
	return info, dir
}

// readWhole reads a file of a version through OpenFile.
func readWhole(t testing.TB, s *store.Store, v uint64, p string) []byte {
	t.Helper()
	f, err := s.OpenFile(v, p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, f.Size())
	if n, err := f.ReadAt(b, 0); n != len(b) {
		t.Fatalf("read %s of version %d: %d of %d bytes: %v", p, v, n, len(b), err)
	}
	return b
}

func mustEqualBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes differ from the %d wanted, first at %d", what, len(got), len(want), i)
	}
}
