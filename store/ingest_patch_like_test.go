package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/logtest"
)

// Versions that came in as deltas (issue 31 item 5) are versions like the rest, also for the
// render cache and for retention: TestSlimeVersionsLikeAnyOther and
// TestPatchedVersionsLikeAnyOther cover verify, catch-up patches, slime deltas and gc.

// deltaInSeries is the model of the tests of versions that came in as deltas
// (TestPatchedVersionsLikeAnyOther, TestSlimeVersionsLikeAnyOther and this file's): n versions of one file of two
// tensors, a changing by 2% every version and b by 30% every other one. It returns each
// version's files and tensors.
func deltaInSeries(t testing.TB, n int) (versions, tensors []map[string][]byte) {
	rng := rand.New(rand.NewPCG(41, 5))
	cur := map[string][]byte{"a": bf16Like(rng, 30_000), "b": bf16Like(rng, 20_000)}
	for i := range n {
		if i > 0 {
			next := map[string][]byte{"a": perturb(rng, cur["a"], 2, 0.02), "b": cur["b"]}
			if i%2 == 0 {
				next["b"] = perturb(rng, cur["b"], 2, 0.3)
			}
			cur = next
		}
		tensors = append(tensors, cur)
		versions = append(versions, map[string][]byte{
			"model.safetensors": safetensorsFile(t, testTensor{"a", delta.DTypeBF16, []int64{30_000}, cur["a"]},
				testTensor{"b", delta.DTypeBF16, []int64{20_000}, cur["b"]}),
			"config.json": []byte(`{"model": "x"}`),
		})
	}
	return versions, tensors
}

// commitDeltaIn seals version v of s as it comes in: whole (how "whole"), as its patch from
// full ("patch", what a trainer writes into patches/), or as slime's delta checkpoint from the
// version before ("slime", what slime writes into deltas/).
func commitDeltaIn(t testing.TB, s, full *Store, how string, v uint64, versions, tensors []map[string][]byte) {
	t.Helper()
	var err error
	switch how {
	case "whole":
		commitTree(t, s, v, versions[v-1])
	case "patch":
		var buf bytes.Buffer
		if _, err = full.WritePatch(v, &writerAtBuffer{&buf}); err == nil {
			_, err = s.CommitPatch(bytes.NewReader(buf.Bytes()), int64(buf.Len()), v)
		}
	case "slime":
		encoding := []string{delta.SlimeOverwrite, delta.SlimeXOR}[v%2]
		in := slimeSend(t, v, encoding, tensors[v-2], tensors[v-1], [][]string{{"a"}, {"b"}})
		_, err = s.CommitSlimeDelta(in[delta.SlimeIndexName], slimeOpener(in), v)
	}
	if err != nil {
		t.Fatalf("version %d as a %s: %v", v, how, err)
	}
}

// TestDeltaVersionsRenderLikeAnyOther: a store whose versions 2 and 3 came in as patches and
// 4 and 5 as slime deltas renders, into its cache, the same patches, catch-up patches and
// slime deltas as a store that ingested every version whole; asked again, it serves each from
// the cache (hits, no misses); a byte flipped in the cached patch of a patched version and in
// the cached delta of a slime version is found on the read, logged, dropped and rendered
// again with the same bytes.
func TestDeltaVersionsRenderLikeAnyOther(t *testing.T) {
	versions, tensors := deltaInSeries(t, 5)
	full, _ := newStore(t, Options{})
	commitAll(t, full, versions)
	log := &logLines{t: t}
	s, _ := newStore(t, Options{Logger: logtest.New(log.logf)})
	for v, how := range []string{"whole", "patch", "patch", "slime", "slime"} {
		commitDeltaIn(t, s, full, how, uint64(v+1), versions, tensors)
	}

	type rendered struct {
		patches map[uint64]RenderedFile
		catchup RenderedFile
		slime   map[uint64][]RenderedFile
	}
	render := func(st *Store) rendered {
		t.Helper()
		out := rendered{patches: map[uint64]RenderedFile{}, slime: map[uint64][]RenderedFile{}}
		for v := uint64(2); v <= 5; v++ {
			rf, err := st.RenderPatch(v)
			if err != nil {
				t.Fatalf("patch of version %d: %v", v, err)
			}
			out.patches[v] = rf
			plan, files, err := st.RenderSlime(v)
			if err != nil || plan.Kind != SlimeDelta {
				t.Fatalf("slime delta of version %d: %+v %v", v, plan, err)
			}
			out.slime[v] = files
		}
		rf, err := st.RenderPatchFrom(5, 2)
		if err != nil {
			t.Fatalf("catch-up patch 2 -> 5: %v", err)
		}
		out.catchup = rf
		return out
	}
	// read reads a render through its checks.
	read := func(rf RenderedFile) []byte {
		t.Helper()
		if rf.Path == "" {
			return rf.Data
		}
		b, err := readRendered(rf, 64<<10)
		if err != nil {
			t.Fatalf("read %s: %v", rf.Path, err)
		}
		return b
	}
	same := func(what string, got, want []RenderedFile) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d files, %d wanted", what, len(got), len(want))
		}
		for i := range want {
			if got[i].Name != want[i].Name {
				t.Fatalf("%s: file %q, %q wanted", what, got[i].Name, want[i].Name)
			}
			mustEqualBytes(t, what+" "+want[i].Name, read(got[i]), read(want[i]))
		}
	}
	want := render(full)
	before := s.Stats()
	got := render(s)
	for v := uint64(2); v <= 5; v++ {
		same(fmt.Sprintf("patch of version %d", v), []RenderedFile{got.patches[v]}, []RenderedFile{want.patches[v]})
		same(fmt.Sprintf("slime delta of version %d", v), got.slime[v], want.slime[v])
	}
	same("catch-up patch 2 -> 5", []RenderedFile{got.catchup}, []RenderedFile{want.catchup})
	first := s.Stats()
	// 4 patches and 1 catch-up patch, 4 deltas: each rendered once.
	if first.RenderMisses-before.RenderMisses != 9 || first.RenderHits != before.RenderHits {
		t.Fatalf("first renders: %d misses and %d hits, want 9 and 0",
			first.RenderMisses-before.RenderMisses, first.RenderHits-before.RenderHits)
	}

	again := render(s)
	second := s.Stats()
	if second.RenderHits-first.RenderHits != 9 || second.RenderMisses != first.RenderMisses {
		t.Fatalf("asked again: %d hits and %d misses, want 9 and 0",
			second.RenderHits-first.RenderHits, second.RenderMisses-first.RenderMisses)
	}
	for v := uint64(2); v <= 5; v++ {
		if again.patches[v].Path != got.patches[v].Path {
			t.Fatalf("patch of version %d served from %s, rendered to %s", v, again.patches[v].Path, got.patches[v].Path)
		}
	}

	// Damage: the patch of version 3 (came in as a patch) and the shard of version 5's delta
	// (came in as a slime delta).
	damaged := []struct {
		what string
		rf   RenderedFile
		want []byte
	}{
		{"patch of version 3", got.patches[3], read(want.patches[3])},
	}
	for i, rf := range got.slime[5] {
		if rf.Path != "" && rf.Name != delta.SlimeIndexName {
			damaged = append(damaged, struct {
				what string
				rf   RenderedFile
				want []byte
			}{"slime delta of version 5, " + rf.Name, rf, read(want.slime[5][i])})
			break
		}
	}
	if len(damaged) != 2 {
		t.Fatalf("version 5's delta has no shard in the cache: %+v", got.slime[5])
	}
	for _, d := range damaged {
		b := readFile(t, d.rf.Path)
		b[len(b)-1] ^= 0x10
		if err := writeOver(d.rf.Path, b); err != nil {
			t.Fatal(err)
		}
		missesBefore := s.Stats().RenderMisses
		if _, err := readRendered(d.rf, 64<<10); !errors.Is(err, ErrDamagedRender) {
			t.Fatalf("read of the damaged %s: %v", d.what, err)
		}
		if !log.has("damaged", d.rf.Path) {
			t.Fatalf("the damaged %s is not logged:\n%s", d.what, log)
		}
		var rebuilt RenderedFile
		if strings.HasPrefix(d.what, "patch") {
			rf, err := s.RenderPatch(3)
			if err != nil {
				t.Fatal(err)
			}
			rebuilt = rf
		} else {
			_, files, err := s.RenderSlime(5)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if f.Name == d.rf.Name {
					rebuilt = f
				}
			}
		}
		if rebuilt.Path != d.rf.Path || s.Stats().RenderMisses != missesBefore+1 {
			t.Fatalf("%s not rendered again in its place: %s, %d misses", d.what, rebuilt.Path, s.Stats().RenderMisses-missesBefore)
		}
		mustEqualBytes(t, d.what+" rendered again", read(rebuilt), d.want)
	}
}

// writeOver replaces the bytes of the cache file p (cache files are written read-only).
func writeOver(p string, b []byte) error {
	if err := os.Chmod(p, 0o600); err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o600)
}

// TestRetentionOfDeltaVersions: with keep-last 2 retention (exact) on, versions that come in
// as patches and as slime deltas are kept and dropped as any other: after each seal the store
// holds the newest two and the version a reader has pinned, each reading back its bytes;
// once the pin is let go the next seal drops it.
func TestRetentionOfDeltaVersions(t *testing.T) {
	versions, tensors := deltaInSeries(t, 7)
	full, _ := newStore(t, Options{})
	commitAll(t, full, versions)
	s, root := newStore(t, Options{Retention: Retention{KeepLast: 2, Exact: true}})
	reader := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir()})
	var pin *Pin
	wantKept := map[uint64][]uint64{1: {1}, 2: {1, 2}, 3: {2, 3}, 4: {3, 4}, 5: {3, 4, 5}, 6: {3, 5, 6}, 7: {6, 7}}
	for v, how := range []string{"whole", "patch", "patch", "slime", "patch", "slime", "patch"} {
		v := uint64(v + 1)
		if v == 7 {
			if err := pin.Close(); err != nil {
				t.Fatal(err)
			}
		}
		commitDeltaIn(t, s, full, how, v, versions, tensors)
		s.collector.ret.idle()
		if got := numbers(s.Versions()); !slices.Equal(got, wantKept[v]) {
			t.Fatalf("after version %d came in as a %s, retention kept %v, want %v", v, how, got, wantKept[v])
		}
		if v == 4 {
			// A reader pins version 3 (it came in as a patch) while it is among the newest.
			if err := reader.Refresh(); err != nil {
				t.Fatal(err)
			}
			var err error
			if pin, err = reader.Pin(3); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range wantKept[v] {
			for name, b := range versions[k-1] {
				mustEqualBytes(t, "kept version's "+name, readWhole(t, s, k, name), b)
			}
		}
	}
	if err := reader.Refresh(); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "version 7 read by the reader", readWhole(t, reader, 7, "model.safetensors"), versions[6]["model.safetensors"])
	if st := s.Stats(); st.RetentionDroppedVersions != 5 {
		t.Fatalf("retention dropped %d versions, want 5 (1, 2, 4, 3, 5)", st.RetentionDroppedVersions)
	}
}

// TestSlimeDeltaKeepsUnchangedFilesInMemory: a version that came in as a slime delta leaves
// the files the delta does not touch in the base in memory for the next version's diffs, as
// a patch does (both seal through addUnchangedFiles): a slime delta that changes only
// model.safetensors leaves sub/other.safetensors's tensor held in memory at the new version.
func TestSlimeDeltaKeepsUnchangedFilesInMemory(t *testing.T) {
	v1, _, t1, t2 := slimeInVersions(t)
	s, _ := newStore(t, Options{BaseMemory: 64 << 20})
	commitTree(t, s, 1, v1)
	in := slimeSend(t, 2, delta.SlimeXOR, t1, t2, [][]string{{"a", "b", "c", "o"}})
	if _, err := s.CommitSlimeDelta(in[delta.SlimeIndexName], slimeOpener(in), 2); err != nil {
		t.Fatal(err)
	}
	m := manifestOf(t, s, 2)
	var other *manifestFile
	for i := range m.Files {
		if m.Files[i].Path == "sub/other.safetensors" {
			other = &m.Files[i]
		}
	}
	if other == nil || len(other.Tensors) != 1 {
		t.Fatalf("version 2 has no sub/other.safetensors of one tensor: %+v", m.Files)
	}
	o := other.Tensors[0]
	e := s.ingest.memory().base(2, o.ID, o.End-o.Begin)
	if e != nil {
		s.ingest.memory().release(e)
	}
	if got := s.BaseMemory(); got.Version != 2 || e == nil {
		t.Fatalf("after the slime delta the base in memory (%+v) does not hold tensor o of the unchanged sub/other.safetensors", got)
	}
}

// catchupPatch is the catch-up patch of s from version from to v.
func catchupPatch(t testing.TB, s *Store, v, from uint64) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := s.WritePatchFrom(v, from, &writerAtBuffer{&buf}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
