package fs

import (
	"context"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// TestDroppedUploadStatIsStale: once an upload is sealed, refused or removed, a stat by path
// must not answer with the upload's attributes, or a reader that stats a patch just written in
// and then opens it gets the upload's size beside the served patch's bytes (open is ESTALE,
// and the kernel looks the name up again; stat must make it do the same): the Python client's
// read_header saw a data section 8 bytes longer than its tensors, the length of
// "leb128_gaps" less "raw". While a handle holds the upload, fstat (which sends no handle on
// Linux) still answers.
func TestDroppedUploadStatIsStale(t *testing.T) {
	s := &stagedUpload{name: "weight_v000006.safetensors", size: 908, dropped: true}
	var out fuse.AttrOut
	if errno := s.Getattr(context.Background(), nil, &out); errno != syscall.ESTALE {
		t.Fatalf("stat by path of a dropped upload: errno %v, want ESTALE", errno)
	}
	s.handles = 1 // a descriptor kept past the rename or an unlink: fstat answers
	if errno := s.Getattr(context.Background(), nil, &out); errno != 0 || out.Size != 908 {
		t.Fatalf("stat of a dropped upload a handle holds: errno %v, size %d, want 0 and 908", errno, out.Size)
	}
	s.handles = 0
	s.dropped = false
	if errno := s.Getattr(context.Background(), nil, &out); errno != 0 || out.Size != 908 {
		t.Fatalf("stat of an upload still in its view: errno %v, size %d, want 0 and 908", errno, out.Size)
	}
}
