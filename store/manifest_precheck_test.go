package store

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestManifestPrecheckMatchesReference: a seal's manifest checked while the objects are made
// durable (a placeholder index name, then the seal's names spliced in) has the bytes of the
// reference (encodeManifestChecked of the manifest with its names), for a seal's own index, a
// group's ranks' indexes beside it and several of each; the splice is taken wherever it
// applies, and where it does not (no name, a name Validate refuses, a manifest over the limit)
// the verdict is the reference's.
func TestManifestPrecheckMatchesReference(t *testing.T) {
	s, _ := newStore(t, Options{})
	data := make([]byte, 64)
	commitTree(t, s, 1, map[string][]byte{
		"a/model-00001-of-00002.safetensors": safetensorsFile(t,
			testTensor{"model.layers.0.mlp.experts.0.up_proj.weight", delta.DTypeBF16, []int64{4, 4}, data[:32]},
			testTensor{"model.layers.0.mlp.experts.1.up_proj.weight", delta.DTypeBF16, []int64{4, 4}, data[32:]}),
		"a/model-00002-of-00002.safetensors": safetensorsFile(t,
			testTensor{"lm_head.weight", delta.DTypeBF16, []int64{8, 4}, data}),
		"config.json": []byte(`{"a": "<&>"}`),
	})
	m := manifestOf(t, s, 1)
	name := func(seq int) string { return fmt.Sprintf("%016d-%016x", seq, 0xabc0+seq) }
	limit := s.ingest.manifestLimit
	for i, c := range []struct{ group, own []string }{
		{nil, []string{name(7)}},
		{nil, []string{name(7), name(8), name(9)}},
		{[]string{name(3), name(12)}, []string{name(7)}},
		{[]string{name(3)}, nil},
	} {
		pre := precheckManifest(m, c.group, limit)
		m.Indexes = mergeIndexNames(c.group, c.own)
		got, ok := pre.spliced(m, limit)
		want, err := encodeManifestChecked(m, limit)
		if err != nil {
			t.Fatal(err)
		}
		if !ok || !bytes.Equal(got, want) {
			t.Errorf("case %d (%v): spliced %v, bytes equal to the reference's %v", i, m.Indexes, ok, bytes.Equal(got, want))
		}
		if b, err := pre.finalManifest(m, limit); err != nil || !bytes.Equal(b, want) {
			t.Errorf("case %d: finalManifest: %v", i, err)
		}
		back, err := decodeManifest(got)
		if err != nil || !sameManifest(back, m) {
			t.Errorf("case %d: the spliced manifest reads back as another (%v)", i, err)
		}
	}
	// Not spliced: the reference's verdict.
	for i, c := range []struct {
		names []string
		limit uint64
		err   error
	}{
		{nil, limit, nil},
		{[]string{"not-a-name"}, limit, ErrCorrupt},
		{[]string{name(7)}, uint64(len(encodeOrFail(t, m))) - 40, ErrManifestTooLarge},
	} {
		m.Indexes = nil
		pre := precheckManifest(m, nil, limit)
		m.Indexes = c.names
		if _, ok := pre.spliced(m, c.limit); ok {
			t.Errorf("refusal %d: spliced", i)
		}
		got, err := pre.finalManifest(m, c.limit)
		want, werr := encodeManifestChecked(m, c.limit)
		if !bytes.Equal(got, want) || (err == nil) != (werr == nil) || c.err != nil && !errors.Is(err, c.err) {
			t.Errorf("refusal %d: %v (reference: %v), want %v", i, err, werr, c.err)
		}
	}
}

func encodeOrFail(t *testing.T, m *manifest) []byte {
	b, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
