package store

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// cutPoints are the offsets at which TestStreamReplay stops a file: the edges of the header
// and of chunks, and a few random ones.
func cutPoints(rng *rand.Rand, n int) []int {
	cuts := []int{0, 1, 7, 8, 9, n / 2, n - 1, n, 4<<20 + 5, 4 << 20}
	for range 3 {
		cuts = append(cuts, rng.IntN(n+1))
	}
	var out []int
	for _, c := range cuts {
		if c >= 0 && c <= n {
			out = append(out, c)
		}
	}
	return out
}

// TestStreamReplay stops streams at many points and checks that Replay gives back exactly
// the bytes written, twice, and that after Close it gives the whole file.
func TestStreamReplay(t *testing.T) {
	versions := streamSeries(t, 4, 11)
	s, _ := newStore(t, Options{MaxChain: 2, Logger: logtest.New(func(string, ...any) {})})
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 3; i++ {
		sealBatch(t, s, uint64(i+1), versions[i])
	}
	files := versions[3]
	w, err := s.NewVersion(4)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for _, p := range sortedPaths(files) {
		data := files[p]
		cuts := cutPoints(rng, len(data))
		if p == "model.safetensors" {
			// Inside the header, and at the end of the header.
			hdr := int(headerNeed(data))
			cuts = append(cuts, hdr-1, hdr, hdr+1, hdr+4<<20+2)
		}
		for _, cut := range cuts {
			if cut > len(data) {
				continue
			}
			st, err := w.StreamFile(p)
			if err != nil {
				t.Fatal(err)
			}
			streamWrites(t, rng, st, data[:cut])
			for round := range 2 {
				var got bytes.Buffer
				if err := st.Replay(&got); err != nil {
					t.Fatalf("%s cut at %d: replay: %v", p, cut, err)
				}
				mustEqualBytes(t, fmt.Sprintf("%s cut at %d, replay %d", p, cut, round), got.Bytes(), data[:cut])
			}
			if _, err := st.Write([]byte{1}); !errors.Is(err, ErrStreamStopped) {
				t.Errorf("%s: write after replay: %v, want ErrStreamStopped", p, err)
			}
			st.Abort()
		}
		st, err := w.StreamFile(p)
		if err != nil {
			t.Fatal(err)
		}
		streamWrites(t, rng, st, data)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := st.Replay(&got); err != nil {
			t.Fatalf("%s: replay after close: %v", p, err)
		}
		mustEqualBytes(t, p+" replayed after close", got.Bytes(), data)
		st.Abort()
	}
}

// TestStreamFallbackMatchesBatch gives up streams at random points, as the mount does when
// a file stops being written in order, and finishes those files through the batch path:
// the versions must equal those of the batch path alone.
func TestStreamFallbackMatchesBatch(t *testing.T) {
	versions := streamSeries(t, 4, 21)
	opts := Options{MaxChain: 2, Logger: logtest.New(func(string, ...any) {})}
	a, _ := newStore(t, opts)
	b, _ := newStore(t, opts)
	rng := rand.New(rand.NewPCG(7, 8))
	for i, files := range versions {
		v := uint64(i + 1)
		sealBatch(t, a, v, files)
		w, err := b.NewVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range sortedPaths(files) {
			data := files[p]
			st, err := w.StreamFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if rng.IntN(2) == 0 {
				streamWrites(t, rng, st, data)
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				if err := w.AddStream(p, st, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			cut := rng.IntN(len(data) + 1)
			streamWrites(t, rng, st, data[:cut])
			var staged bytes.Buffer
			if err := st.Replay(&staged); err != nil {
				t.Fatal(err)
			}
			st.Abort()
			staged.Write(data[cut:])
			if err := w.AddFile(p, bytes.NewReader(staged.Bytes()), int64(staged.Len()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Seal(); err != nil {
			t.Fatal(err)
		}
		sameStores(t, fmt.Sprintf("v%d", v), a, b, v)
	}
}

// TestStreamFailureReplay makes the worker fail (a base that cannot be read, an object that
// cannot be written) at every chunk in turn: the stream reports it, and Replay still gives
// back every byte it took.
func TestStreamFailureReplay(t *testing.T) {
	versions := streamSeries(t, 3, 31)
	s, _ := newStore(t, Options{MaxChain: 2, Logger: logtest.New(func(string, ...any) {})})
	sealBatch(t, s, 1, versions[0])
	sealBatch(t, s, 2, versions[1])
	files := versions[2]
	rng := rand.New(rand.NewPCG(9, 10))
	injected := errors.New("injected")
	for _, point := range []string{"stream-base-read", "stream-object-put"} {
		for k := int64(1); k <= 6; k++ {
			w, err := s.NewVersion(3)
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			s.hook = func(p string) error {
				if p == point && calls.Add(1) == k {
					return injected
				}
				return nil
			}
			p := "model.safetensors"
			data := files[p]
			st, err := w.StreamFile(p)
			if err != nil {
				t.Fatal(err)
			}
			accepted := 0
			for accepted < len(data) {
				n := min(1+rng.IntN(1<<20), len(data)-accepted)
				if _, err := st.Write(data[accepted : accepted+n]); err != nil {
					if !errors.Is(err, injected) || !errors.Is(err, ErrStreamStopped) {
						t.Fatalf("%s #%d: write: %v", point, k, err)
					}
					break
				}
				accepted += n
			}
			closeErr := st.Close()
			if calls.Load() >= k && !errors.Is(closeErr, injected) && accepted == len(data) {
				t.Fatalf("%s #%d: close after a failure: %v", point, k, closeErr)
			}
			var got bytes.Buffer
			if err := st.Replay(&got); err != nil {
				t.Fatalf("%s #%d: replay: %v", point, k, err)
			}
			mustEqualBytes(t, fmt.Sprintf("%s #%d replayed", point, k), got.Bytes(), data[:accepted])
			s.hook = nil
			w.Abort()
		}
	}
}

// TestStreamRedoesWhenBasesMove covers the cases where the stream's diff base is not the
// batch path's at AddStream: the file was renamed onto a path whose same-named tensor is
// another one, or a version was sealed while the stream ran. Both are redone through the
// batch path, so the version equals the batch path's.
func TestStreamRedoesWhenBasesMove(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	x, y := bf16Like(rng, 5000), bf16Like(rng, 5000)
	v1 := map[string][]byte{
		"a.safetensors": safetensorsFile(t, testTensor{"t", "BF16", []int64{5000}, x}),
		"b.safetensors": safetensorsFile(t, testTensor{"t", "BF16", []int64{5000}, y}),
	}
	v2 := map[string][]byte{"a.safetensors": safetensorsFile(t, testTensor{"t", "BF16", []int64{5000}, perturb(rng, x, 2, 0.01)})}
	// Written as a.safetensors, renamed to b.safetensors before the seal.
	renamed := safetensorsFile(t, testTensor{"t", "BF16", []int64{5000}, perturb(rng, y, 2, 0.01)})
	v3 := map[string][]byte{"b.safetensors": renamed}

	opts := Options{Logger: logtest.New(func(string, ...any) {})}
	a, _ := newStore(t, opts)
	b, _ := newStore(t, opts)
	sealBatch(t, a, 1, v1)
	sealBatch(t, b, 1, v1)

	// In b, version 3 streams while version 2 is still open, and is renamed.
	w2, err := b.NewVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	w3, err := b.NewVersion(3)
	if err != nil {
		t.Fatal(err)
	}
	st, err := w3.StreamFile("a.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	streamWrites(t, rng, st, renamed)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2, err := w2.StreamFile("a.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	streamWrites(t, rng, st2, v2["a.safetensors"])
	if err := st2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w2.AddStream("a.safetensors", st2, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Seal(); err != nil {
		t.Fatal(err)
	}
	sealBatch(t, a, 2, v2)
	sameStores(t, "v2", a, b, 2)
	if err := w3.AddStream("b.safetensors", st, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w3.Seal(); err != nil {
		t.Fatal(err)
	}
	sealBatch(t, a, 3, v3)
	sameStores(t, "v3", a, b, 3)

	// A rename alone (no version sealed meanwhile) is redone too when the bases differ.
	v4 := map[string][]byte{"a.safetensors": safetensorsFile(t, testTensor{"t", "BF16", []int64{5000}, perturb(rng, x, 2, 0.02)}),
		"b.safetensors": renamed}
	sealBatch(t, a, 4, v4)
	w4, err := b.NewVersion(4)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a.safetensors", "b.safetensors"} {
		hint := map[string]string{"a.safetensors": "b.safetensors", "b.safetensors": "a.safetensors"}[p]
		st, err := w4.StreamFile(hint)
		if err != nil {
			t.Fatal(err)
		}
		streamWrites(t, rng, st, v4[p])
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w4.AddStream(p, st, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w4.Seal(); err != nil {
		t.Fatal(err)
	}
	sameStores(t, "v4", a, b, 4)
}

// TestStreamDetectsDamagedCopy damages the materialized copy under a tensor that the next
// version is diffed against: the read of the base fails its check against the copy's sums
// (logged), the stream reads the base from the objects instead rather than store a delta
// against wrong bytes (and hashes the whole base from there on, the bytes before the damage
// read again from the objects: stream_check.go), and the version is stored correctly.
func TestStreamDetectsDamagedCopy(t *testing.T) {
	versions := streamSeries(t, 2, 41)
	var log logLines
	s, _ := newStore(t, Options{Logger: logtest.New(log.logf)})
	rng := rand.New(rand.NewPCG(1, 2))
	sealStreamed(t, s, 1, versions[0], rng)
	if err := s.mat.ensure(); err != nil {
		t.Fatal(err)
	}
	p := "model.safetensors"
	damageCopy(t, s, 1, p)
	data := versions[1][p]
	w, err := s.NewVersion(2)
	if err != nil {
		t.Fatal(err)
	}
	st, err := w.StreamFile(p)
	if err != nil {
		t.Fatal(err)
	}
	streamWrites(t, rng, st, data)
	if err := st.Close(); err != nil {
		t.Fatalf("close over a damaged copy: %v", err)
	}
	if !log.has("chunk") || !log.has("not served") {
		t.Errorf("the damaged chunk is not logged:\n%s", log.String())
	}
	if err := w.AddStream(p, st, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "sealed over a damaged copy", readWhole(t, s, 2, p), data)
	if _, err := s.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// TestBatchDetectsDamagedCopy is the batch path's side of TestStreamDetectsDamagedCopy: AddFile
// over a damaged copy finds the damage (the base's CRC, noted when it was diffed in, or its
// SHA-256 when forgotten: bytes the page cache holds are read without the copy's chunk sums,
// matView.readCached; the sums where they are read from the disk), has the copy rebuilt,
// and stores the version correctly.
func TestBatchDetectsDamagedCopy(t *testing.T) {
	for _, knownCRC := range []bool{true, false} {
		t.Run(fmt.Sprintf("CRC known %v", knownCRC), func(t *testing.T) {
			versions := streamSeries(t, 3, 43)
			var logMu sync.Mutex
			var logged []string
			s, _ := newStore(t, Options{Logger: logtest.New(func(format string, args ...any) {
				logMu.Lock()
				logged = append(logged, fmt.Sprintf(format, args...))
				logMu.Unlock()
			})})
			sealBatch(t, s, 1, versions[0])
			sealBatch(t, s, 2, versions[1])
			if err := s.mat.ensure(); err != nil {
				t.Fatal(err)
			}
			p := "model.safetensors"
			big := damageCopy(t, s, 2, p)
			if _, ok := s.mat.crcs.get(big); !ok {
				t.Fatal("no CRC noted for a tensor the batch path diffed")
			}
			if !knownCRC {
				s.mat.crcs.forget(map[ID]matLoc{big: {}}, nil)
				if _, ok := s.mat.crcs.get(big); ok {
					t.Fatal("the CRC was not forgotten")
				}
			}
			data := versions[2][p]
			w, err := s.NewVersion(3)
			if err != nil {
				t.Fatal(err)
			}
			logMu.Lock()
			logged = nil
			logMu.Unlock()
			if err := w.AddFile(p, bytes.NewReader(data), int64(len(data)), 0o644); err != nil {
				t.Fatalf("AddFile over a damaged copy: %v", err)
			}
			logMu.Lock()
			found := slices.ContainsFunc(logged, func(l string) bool { return strings.Contains(l, "not served") })
			logMu.Unlock()
			if !found {
				t.Errorf("the damaged copy was not found: the log says %q", logged)
			}
			for q, other := range versions[2] {
				if q != p {
					if err := w.AddFile(q, bytes.NewReader(other), int64(len(other)), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := w.Seal(); err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, "sealed over a damaged copy", readWhole(t, s, 3, p), data)
			if _, err := s.Verify(nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// damageCopy flips a bit in the middle of file p of the materialized copy (which holds version
// v), inside the file's first tensor, and returns that tensor's object.
func damageCopy(t *testing.T, s *Store, v uint64, p string) ID {
	t.Helper()
	ver, err := s.versions.loadVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	mat := filepath.Join(s.cache.dir, "materialized", p)
	b, err := os.ReadFile(mat)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40 // inside the big tensor
	if err := os.WriteFile(mat, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return ver.files[p].Tensors[0].ID
}
