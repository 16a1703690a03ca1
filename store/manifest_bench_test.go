package store

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// BenchmarkEncodeManifestChecked: the seal's manifest check for a version of 3,147 tensors
// in 8 files (figure moe's version 2 in BenchmarkCommitMoE), as it is (checked: encode,
// decode, sameManifest) and as it was (reencoded: encode, decode, encode, compare), in one run.
func BenchmarkEncodeManifestChecked(b *testing.B) {
	m := &manifest{Version: 2, Previous: 1, Created: time.Now().UTC(), Dirs: []manifestDir{}}
	n := 0
	for f := range 8 {
		mf := manifestFile{Path: fmt.Sprintf("model-%05d-of-00008.safetensors", f+1), Mode: 0o644,
			Kind: kindSafetensors, Header: IDOf([]byte{byte(f)}), HeaderLen: 4096, SHA256: IDOf([]byte{byte(f), 1})}
		var off int64
		for i := 0; i < 394 && n < 3147; i++ {
			t := manifestTensor{Name: fmt.Sprintf("model.layers.%d.mlp.experts.%d.down_proj.weight", n/128, n%128),
				DType: delta.DTypeBF16, Shape: []int64{64, 192}, Begin: off, End: off + 64*192*2,
				ID: IDOf([]byte(fmt.Sprint("id", n))), Base: IDOf([]byte(fmt.Sprint("base", n))), Changed: 300}
			off = t.End
			mf.Tensors = append(mf.Tensors, t)
			n++
		}
		mf.Size = mf.HeaderLen + off
		m.Files = append(m.Files, mf)
	}
	b.Run("checked", func(b *testing.B) {
		for range b.N {
			if _, err := encodeManifestChecked(m, maxManifestLen); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reencoded", func(b *testing.B) {
		for range b.N {
			data, err := encodeManifest(m)
			if err != nil {
				b.Fatal(err)
			}
			back, err := decodeManifest(data)
			if err != nil {
				b.Fatal(err)
			}
			if again, err := encodeManifest(back); err != nil || !bytes.Equal(again, data) {
				b.Fatal("reads back as another manifest", err)
			}
		}
	})
}
