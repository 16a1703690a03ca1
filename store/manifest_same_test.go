package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// cloneManifest is a deep copy of m (plain JSON, without the reader's checks).
func cloneManifest(t *testing.T, m *manifest) *manifest {
	t.Helper()
	js, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var c manifest
	if err := json.Unmarshal(js, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// manifestMutations changes, one at a time, every field of a copy of m reached through v (a
// field of the copy, its path for the messages): each scalar and array, each time, each slice
// grown by an element and its nil and empty forms swapped.
func manifestMutations(v reflect.Value, path string, visit func(path string, mutate func())) {
	switch v.Kind() {
	case reflect.String:
		visit(path, func() { v.SetString(v.String() + "x") })
	case reflect.Int, reflect.Int64, reflect.Int32:
		visit(path, func() { v.SetInt(v.Int() + 1) })
	case reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Uint16, reflect.Uint8:
		visit(path, func() { v.SetUint(v.Uint() + 1) })
	case reflect.Array:
		visit(path, func() { v.Index(v.Len() - 1).SetUint(v.Index(v.Len()-1).Uint() ^ 1) })
	case reflect.Slice:
		visit(path+" grown", func() { v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem()))) })
		visit(path+" nil/empty", func() {
			if v.IsNil() {
				v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			} else if v.Len() == 0 {
				v.Set(reflect.Zero(v.Type()))
			}
		})
		for i := range v.Len() {
			manifestMutations(v.Index(i), path+"["+string(rune('0'+i))+"]", visit)
		}
	case reflect.Struct:
		if tm, ok := v.Addr().Interface().(*time.Time); ok {
			visit(path+" +1ns", func() { *tm = tm.Add(time.Nanosecond) })
			visit(path+" +1s", func() { *tm = tm.Add(time.Second) })
			visit(path+" zone", func() { *tm = tm.In(time.FixedZone("x", 3600)) })
			visit(path+" same instant and zone", func() { *tm = tm.In(time.FixedZone("y", 0)) })
			return
		}
		for i := range v.NumField() {
			manifestMutations(v.Field(i), path+"."+v.Type().Field(i).Name, visit)
		}
	default:
		panic("manifestMutations: no mutation for " + v.Kind().String() + " at " + path)
	}
}

// TestSameManifestComparesEveryField: sameManifest never answers true for manifests that
// encode to other bytes (the seal would then skip the check that caught them), whatever
// field of whatever type differs, fields added later included: each field of a manifest that
// sets them all is changed in turn, and the encodings decide.
func TestSameManifestComparesEveryField(t *testing.T) {
	m := sampleManifest()
	m.Indexes = []string{"idx-a", "idx-b"}
	m.Files[1].Tensors = append(m.Files[1].Tensors, manifestTensor{Name: "scalar", DType: delta.DTypeF32, Shape: []int64{}, Begin: 16, End: 20})
	want, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if !sameManifest(m, cloneManifest(t, m)) {
		t.Fatal("a manifest and its copy are not the same")
	}
	changed := 0
	manifestMutations(reflect.ValueOf(cloneManifest(t, m)).Elem(), "manifest", func(path string, mutate func()) {
		c := cloneManifest(t, m)
		// Mutate the field at the same path of the fresh copy c: walk again to reach it.
		manifestMutations(reflect.ValueOf(c).Elem(), "manifest", func(p string, f func()) {
			if p == path {
				f()
			}
		})
		got, err := encodeManifest(c)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		differs := !bytes.Equal(got, want)
		if differs {
			changed++
		}
		if differs && sameManifest(m, c) {
			t.Errorf("%s changed: the manifest encodes otherwise, and sameManifest says it is the same", path)
		}
	})
	if changed < 40 {
		t.Fatalf("only %d mutations changed the encoding", changed)
	}
}

// TestSealedManifestIsItsDecoding: the manifest a seal keeps in memory (for the copy's update
// and the reads that follow) is the one its bytes decode to, by sameManifest: the seal's
// round-trip check takes its short way for the manifests commit makes (a directory, a blob,
// a safetensors file with a scalar and without tensors). The copy's update, brought forward
// by the second seal, uses the versions in memory: no manifest is parsed again.
func TestSealedManifestIsItsDecoding(t *testing.T) {
	s, _ := newStore(t, Options{})
	tree := func(w byte) map[string][]byte {
		return map[string][]byte{
			"config.json": []byte(`{"a": 1}`),
			"sub/model.safetensors": safetensorsFile(t,
				testTensor{"w", delta.DTypeBF16, []int64{2, 4}, bytes.Repeat([]byte{1, w}, 8)},
				testTensor{"scale", delta.DTypeF32, []int64{}, []byte{0, 0, 128, 63}}),
			"sub/empty.safetensors": safetensorsFile(t),
		}
	}
	commitAll(t, s, []map[string][]byte{tree(2), tree(3)})
	if n := s.versions.manifests.decoded.Load(); n != 0 {
		t.Errorf("two seals and the copy's update parsed %d tensors from manifests, want 0", n)
	}
	if got, _ := s.mat.heldVersionNoWait(); got != 2 {
		t.Fatalf("the copy holds version %d, want 2", got)
	}
	ver, err := s.versions.loadVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	data, err := s.be.GetManifest(2)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	if !sameManifest(back, ver.m) {
		t.Fatalf("the sealed manifest in memory is not the one its bytes decode to:\n%+v\n%+v", ver.m, back)
	}
}

// TestEncodeManifestCheckedTheLongWay: a manifest that decodes to another value is still
// judged by its bytes. A tensor name that is not UTF-8 is written as the escape \ufffd, read
// as U+FFFD and written again as its three bytes: the seal refuses it, as before sameManifest.
func TestEncodeManifestCheckedTheLongWay(t *testing.T) {
	m := sampleManifest()
	m.Files[1].Tensors[0].Name = "a\xff"
	b, err := encodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := decodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if sameManifest(back, m) {
		t.Fatal("a name that is not UTF-8 reads back as itself")
	}
	if _, err := encodeManifestChecked(m, maxManifestLen); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a manifest that reads back as another one: %v, want ErrCorrupt", err)
	}
	m.Files[1].Tensors[0].Name = "a"
	if _, err := encodeManifestChecked(m, maxManifestLen); err != nil {
		t.Fatal(err)
	}
}
