package store

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store/format"
)

// checkHeadsAgree: where format.DecodeManifestHead reads manifest JSON, encoding/json
// (decodeManifestHeadReflect) reads the same head. It reports whether the fast one read it.
func checkHeadsAgree(t *testing.T, js []byte) bool {
	t.Helper()
	fast, ferr := format.DecodeManifestHead(js)
	if ferr != nil {
		return false
	}
	ref, rerr := decodeManifestHeadReflect(js)
	if rerr != nil {
		t.Fatalf("DecodeManifestHead reads what encoding/json refuses (%v): %q", rerr, js)
	}
	if !reflect.DeepEqual(fast, ref) {
		t.Fatalf("heads differ on %q:\nfast %#v\nref  %#v", js, fast, ref)
	}
	return true
}

// TestManifestHeadsAgree: the manifests a writer writes (the fixtures', others), and JSON
// written otherwise, read as the same head both ways; what the fast decoder leaves alone is
// still read (decodeManifestSummaryIndexes).
func TestManifestHeadsAgree(t *testing.T) {
	var docs [][]byte
	for _, m := range []*manifest{sampleManifest(), tinyTensorManifest(3, 4), {Version: 7, Previous: 5, Indexes: []string{"a"}}} {
		b, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	paths, err := filepath.Glob("testdata/v[0-9]/versions/v*")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixture manifests: %v", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	for _, b := range docs {
		js, err := manifestBody(b)
		if err != nil {
			t.Fatal(err)
		}
		if !checkHeadsAgree(t, js) {
			t.Fatalf("DecodeManifestHead leaves a writer's manifest to encoding/json: %.200q", js)
		}
	}
	js, _ := manifestBody(docs[0])
	for _, tc := range []struct {
		js   string
		fast bool
	}{
		{`{"version":2,"dirs":7,"files":[1,"x",{"a":[]},null],"stats":{"total_elements":3},"indexes":null}`, true},
		{`{"version":2,"files":null,"indexes":[]} `, true},
		{`{"version":2,"unknown":1}`, false},
		{`{"VERSION":2}`, false},
		{`{"version":2,"stats":{"x":1}}`, false},
		{`{"version":2}}`, false},
		{strings.Replace(string(js), `"files":[`, `"files":[1,`, 1), true},
	} {
		if got := checkHeadsAgree(t, []byte(tc.js)); got != tc.fast {
			t.Errorf("%q: fast decoder reads it: %v, want %v", tc.js, got, tc.fast)
		}
	}
}

// FuzzManifestHead: where format.DecodeManifestHead reads JSON, encoding/json reads the same
// head (where it does not, decodeManifestSummaryIndexes asks encoding/json).
func FuzzManifestHead(f *testing.F) {
	for _, m := range []*manifest{sampleManifest(), {Version: 7, Previous: 5, Indexes: []string{"a"}}} {
		b, err := encodeManifest(m)
		if err != nil {
			f.Fatal(err)
		}
		js, _ := manifestBody(b)
		f.Add(js)
	}
	f.Add([]byte(`{"version":2,"dirs":7,"files":[1,"x",{"a":[]},null],"stats":{"total_elements":3},"indexes":null}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		checkHeadsAgree(t, js)
	})
}
