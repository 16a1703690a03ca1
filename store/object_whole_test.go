package store

import (
	"fmt"
	"testing"
)

// TestReadWholeMatchesTheReadPath: Verify's whole reads of small objects (object_whole.go)
// give every tensor's bytes exactly as the read path rebuilds them, for full objects and for
// deltas on them, and are taken (not silently always falling back); with the header not in
// this process's cache they decline, and the caller reads the ordinary way.
func TestReadWholeMatchesTheReadPath(t *testing.T) {
	versions, root := committedVersions(t, 3, 93)
	s := openStore(t, root, Options{ReadOnly: true})
	taken := map[objectKind]int{}
	seen := map[ID]bool{} // an unchanged tensor is the same object in the next version
	for v := uint64(1); v <= 3; v++ {
		ver, err := s.versions.sealedVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		for path, f := range ver.files {
			for _, tn := range f.Tensors {
				want := versions[v-1][path][f.HeaderLen+tn.Begin : f.HeaderLen+tn.End]
				what := fmt.Sprintf("version %d %s %s", v, path, tn.Name)
				if _, _, _, ok := s.objects.readWhole(tn.ID, nil, nil); ok && !seen[tn.ID] {
					t.Fatalf("%s: read whole before its header was read", what)
				}
				got := make([]byte, len(want))
				if err := s.objects.readObject(tn.ID, objHint{path: path, tensor: tn.Name}, 0, got, readOpts{}); err != nil {
					t.Fatalf("%s: the read path: %v", what, err)
				}
				mustEqualBytes(t, what+", the read path", got, want)
				seen[tn.ID] = true
				info, _ := s.objects.objInfos.get(tn.ID)
				content, _, _, ok := s.objects.readWhole(tn.ID, nil, nil)
				if !ok {
					continue
				}
				mustEqualBytes(t, what+", read whole", content, want)
				taken[info.hdr.Kind]++
			}
		}
	}
	if taken[kindFull] == 0 || taken[kindDelta] == 0 {
		t.Fatalf("whole reads taken: %d full objects, %d deltas; want some of each", taken[kindFull], taken[kindDelta])
	}
}
