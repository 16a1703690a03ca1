package delta

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/zeebo/xxh3"
)

// The fast paths of apply against their references: the parallel and mapped scans against
// the sequential one, the mapped write against WriteAt, on a patch large enough to be split
// over several writers and cursor batches.

// bigTestPatch is a 4 MiB bf16 file with ~10% of its elements changed (~200k changes, over
// several cursor batches per tensor) and its patch.
func bigTestPatch(t *testing.T) (base, result, raw []byte, p *Patch) {
	t.Helper()
	base, result = syntheticVersions(t, 4<<20, 0.1, 3)
	raw, p = buildTestPatch(t, 2, 1, map[string][]byte{"model.safetensors": base},
		map[string][]byte{"model.safetensors": result}, []string{"model.safetensors"})
	if p.Plan.TotalChanged() < 3*cursorBatch {
		t.Fatalf("only %d changes", p.Plan.TotalChanged())
	}
	return base, result, raw, p
}

func TestScanPathsAgree(t *testing.T) {
	base, result, _, p := bigTestPatch(t)
	const name = "model.safetensors"
	f := openFileTarget(t, base).(*fileTarget)
	m, err := mapTarget(f, int64(len(base)))
	if errors.Is(err, errNoMapping) {
		t.Skipf("no mapping on this platform: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	defer m.unmap()
	layout, err := readTargetLayout(p.TensorsOf(name), f, int64(len(base)), name, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []digestKind{digestXXH3, digestSHA256} {
		want := scanResult{input: oneShot(kind, base), output: oneShot(kind, result)}
		for _, chunk := range []int64{1 << 10, 4097, 256 << 10, scanChunk} {
			for _, path := range []struct {
				name string
				scan func() (scanResult, error)
			}{
				{"sequential", func() (scanResult, error) { return scanSequential(p, layout, f, int64(len(base)), kind, chunk) }},
				{"parallel", func() (scanResult, error) { return scanParallel(p, layout, f, int64(len(base)), kind, chunk) }},
				{"mapped", func() (scanResult, error) { return scanMapped(p, layout, m.data, kind, true, chunk) }},
			} {
				got, err := path.scan()
				if err != nil || got != want {
					t.Errorf("%s %s chunk %d: %v %v, want %v", kind, path.name, chunk, got, err, want)
				}
			}
			// Resuming needs no input hash.
			if got, err := scanMapped(p, layout, m.data, kind, false, chunk); err != nil || got.output != want.output || got.input != (digest{}) {
				t.Errorf("%s mapped without input: %v %v", kind, got, err)
			}
		}
	}
}

// oneShot hashes b with the one-call form of the hash.
func oneShot(kind digestKind, b []byte) digest {
	if kind == digestXXH3 {
		return xxh3Digest(xxh3.Hash128(b).Bytes())
	}
	return digest{n: 32, sum: sha256.Sum256(b)}
}

func TestWritePathsAgree(t *testing.T) {
	base, result, _, p := bigTestPatch(t)
	for _, v := range applyVariants {
		t.Run(v.name, func(t *testing.T) {
			target := v.open(t, base)
			res, err := applyPatch(p, target, int64(len(base)), "model.safetensors", &memJournal{}, v.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(target.bytes(t), result) {
				t.Fatal("patched file differs from the result")
			}
			if res.ElementsWritten != p.Plan.TotalChanged() || res.Method != v.method {
				t.Errorf("result %+v, want %d elements by %s", res, p.Plan.TotalChanged(), v.method)
			}
		})
	}
}

func TestSplitChanges(t *testing.T) {
	tensor := func(changed int64) appliedTensor { return appliedTensor{plan: PatchTensor{Changed: changed}} }
	tests := []struct {
		changed  []int64
		workers  int
		minPairs int64
		shares   int
	}{
		{[]int64{10}, 2, 1, 2},
		{[]int64{10}, 2, 100, 1}, // too small to split
		{[]int64{3, 1, 7, 1}, 3, 1, 3},
		{[]int64{1, 1}, 5, 1, 2},
		{[]int64{5}, 1, 1, 1},
		{[]int64{200_000, 50_000, 70_000}, 2, minPairsPerWorker, 2},
	}
	for _, tt := range tests {
		var tensors []appliedTensor
		var total int64
		for _, c := range tt.changed {
			tensors = append(tensors, tensor(c))
			total += c
		}
		shares := splitChanges(tensors, tt.workers, tt.minPairs)
		if len(shares) != tt.shares {
			t.Errorf("%v over %d: %d shares, want %d", tt.changed, tt.workers, len(shares), tt.shares)
		}
		// The shares cover every pair once, in order, and differ in size by at most one share's rounding.
		ti, next := 0, int64(0)
		per := (total + int64(len(shares)) - 1) / int64(len(shares))
		for _, share := range shares {
			var n int64
			for _, cr := range share {
				for ti < len(tensors) && next == tensors[ti].plan.Changed {
					ti, next = ti+1, 0
				}
				if cr.from != next || cr.to <= cr.from || cr.tensor.plan.Changed != tensors[ti].plan.Changed {
					t.Fatalf("%v: range %d-%d of tensor %d, want from %d", tt.changed, cr.from, cr.to, ti, next)
				}
				next = cr.to
				n += cr.to - cr.from
			}
			if n > per {
				t.Errorf("%v: a share of %d pairs, more than %d", tt.changed, n, per)
			}
		}
		if ti != len(tensors)-1 || next != tensors[ti].plan.Changed {
			t.Errorf("%v: shares end at tensor %d pair %d", tt.changed, ti, next)
		}
	}
}

func TestApplyOptions(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, p := buildTestPatch(t, 43, 42, base, result, order)
	const name = "model.safetensors"
	size := int64(len(base[name]))
	// A patch written before xxh3 was recorded: the same patch without the xxh3 keys.
	oldRaw := reencodePatch(t, raw, func(m map[string]string, ts []Tensor) []Tensor {
		for k := range m {
			if strings.Contains(k, "_xxh3:") {
				delete(m, k)
			}
		}
		return ts
	})
	old, err := OpenPatch(bytes.NewReader(oldRaw), int64(len(oldRaw)))
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := old.File(name); f.HasXXH3 {
		t.Fatal("a patch without xxh3 keys reads as having them")
	}
	tests := []struct {
		name  string
		patch *Patch
		opts  ApplyOptions
		hash  string
		syncs int
	}{
		{"default", p, ApplyOptions{}, "xxh3-128", 0},
		{"sync", p, ApplyOptions{Sync: true}, "xxh3-128", 3}, // after marking, writing, restoring
		{"verify-sha256", p, ApplyOptions{VerifySHA256: true}, "SHA-256", 0},
		{"patch without xxh3", old, ApplyOptions{}, "SHA-256", 0},
	}
	for _, tt := range tests {
		for _, v := range applyVariants {
			t.Run(tt.name+"/"+v.name, func(t *testing.T) {
				target := v.open(t, base[name])
				cfg := v.cfg
				cfg.opts = tt.opts
				res, err := applyPatch(tt.patch, target, size, name, &memJournal{}, cfg)
				if err != nil || !bytes.Equal(target.bytes(t), result[name]) {
					t.Fatalf("apply: %v", err)
				}
				if res.Hash != tt.hash || res.Synced != tt.opts.Sync || target.syncCount() != tt.syncs {
					t.Errorf("result %+v with %d syncs, want %s and %d syncs", res, target.syncCount(), tt.hash, tt.syncs)
				}
				if !strings.Contains(res.String(), tt.hash+" checked") {
					t.Errorf("result line %q", res)
				}
			})
		}
	}
}

// TestApplyXXH3Refusals: with xxh3 checked, a wrong base or a patch whose recorded xxh3 does
// not match what it produces is refused before anything is written.
func TestApplyXXH3Refusals(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 43, 42, base, result, order)
	const name = "model.safetensors"
	set := func(key, value string) *Patch {
		b := reencodePatch(t, raw, func(m map[string]string, ts []Tensor) []Tensor { m[key] = value; return ts })
		p, err := OpenPatch(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	zero := strings.Repeat("0", 32)
	tests := []struct {
		name  string
		patch *Patch
		opts  ApplyOptions
		want  error
		msg   string
	}{
		{"base xxh3 differs", set("base_xxh3:"+name, zero), ApplyOptions{}, ErrBaseMismatch, "neither the patch's base"},
		{"result xxh3 differs", set("result_xxh3:"+name, zero), ApplyOptions{}, ErrMalformed, "not its recorded result"},
		// SHA-256 checks what it checks: the xxh3 keys are not looked at.
		{"result xxh3 differs, SHA-256 asked for", set("result_xxh3:"+name, zero), ApplyOptions{VerifySHA256: true}, nil, ""},
	}
	for _, tt := range tests {
		for _, v := range applyVariants {
			t.Run(tt.name+"/"+v.name, func(t *testing.T) {
				target := v.open(t, base[name])
				j := &memJournal{}
				cfg := v.cfg
				cfg.opts = tt.opts
				_, err := applyPatch(tt.patch, target, int64(len(base[name])), name, j, cfg)
				if tt.want == nil {
					if err != nil || !bytes.Equal(target.bytes(t), result[name]) {
						t.Errorf("apply: %v", err)
					}
					return
				}
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), "xxh3-128") {
					t.Errorf("error %v, want %v containing %q", err, tt.want, tt.msg)
				}
				if !bytes.Equal(target.bytes(t), base[name]) || j.ok || target.syncCount() != 0 {
					t.Error("a refused apply touched the target or the journal")
				}
			})
		}
	}
}

// TestMappedFaultIsAnError truncates a mapped file under the scan and the write: the fault
// (SIGBUS) is an error, not a crash.
func TestMappedFaultIsAnError(t *testing.T) {
	base, _, _, p := bigTestPatch(t)
	const name = "model.safetensors"
	f := openFileTarget(t, base).(*fileTarget)
	layout, err := readTargetLayout(p.TensorsOf(name), f, int64(len(base)), name, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mapTarget(f, int64(len(base)))
	if errors.Is(err, errNoMapping) {
		t.Skipf("no mapping on this platform: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	defer m.unmap()
	if err := f.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := scanMapped(p, layout, m.data, digestXXH3, true, mappedChunk); err == nil || !strings.Contains(err.Error(), "memory fault") {
		t.Errorf("scan of a truncated mapping: %v", err)
	}
	var res ApplyResult
	if err := writeMapped(p, layout, m, &res, applyConfig{}); err == nil || !strings.Contains(err.Error(), "memory fault") {
		t.Errorf("write to a truncated mapping: %v", err)
	}
	if err := writePages(p, layout, f, m.data, &res, applyConfig{workers: 2}); err == nil || !strings.Contains(err.Error(), "memory fault") {
		t.Errorf("page write from a truncated mapping: %v", err)
	}
	// And mapping a file whose size changed since it was checked is refused.
	if _, err := mapTarget(f, int64(len(base))); !errors.Is(err, ErrBaseMismatch) {
		t.Errorf("map of a file that changed size: %v", err)
	}
}

// TestApplyPatchFileSync runs the file-level apply with and without --sync: same bytes, the
// journal gone either way.
func TestApplyPatchFileSync(t *testing.T) {
	base, result, order := threeFileVersions(t)
	raw, _ := buildTestPatch(t, 43, 42, base, result, order)
	for _, opts := range []ApplyOptions{{}, {Sync: true}, {Sync: true, VerifySHA256: true}} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			dir := t.TempDir()
			patchPath := filepath.Join(dir, "patch.safetensors")
			os.WriteFile(patchPath, raw, 0o644)
			for _, n := range []string{"model.safetensors", "config.json"} {
				target := filepath.Join(dir, n)
				os.WriteFile(target, base[n], 0o644)
				res, err := ApplyPatchFileWith(patchPath, target, opts)
				if err != nil || res.Synced != opts.Sync {
					t.Fatalf("%s: %+v %v", n, res, err)
				}
				if got, _ := os.ReadFile(target); !bytes.Equal(got, result[n]) {
					t.Errorf("%s differs from the result", n)
				}
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 3 {
				t.Errorf("%d entries in the directory, want the patch and the two files", len(entries))
			}
		})
	}
}

// TestStoreBatchMatchesGeneral compares the bf16 store loop with the general one, on good
// indices and on an index out of order (which both must refuse, naming the tensor).
func TestStoreBatchMatchesGeneral(t *testing.T) {
	base, _, raw, p := bigTestPatch(t)
	h, err := ParseHeader(base, int64(len(base)))
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(raw)
	pt := p.Plan.Tensors[3]
	at := p.Header.DataStart() + p.entries[pt.Name+indicesSuffix].Begin + 4*100
	copy(bad[at:at+4], bad[at-4:at]) // pair 100 repeats pair 99's index
	badPatch, err := OpenPatch(bytes.NewReader(bad), int64(len(bad)))
	if err != nil {
		t.Fatal(err)
	}
	for _, patch := range []*Patch{p, badPatch} {
		for _, pt := range patch.Plan.Tensors {
			th, _ := h.Tensor(pt.Name)
			begin := h.DataStart() + th.Begin
			fast, general := bytes.Clone(base), bytes.Clone(base)
			var errs [2]error
			for i, store := range []func(*patchCursor, []byte, int64, int64) error{storeBatch, storeBatchGeneral} {
				data := [][]byte{fast, general}[i]
				c := patch.newCursor(pt)
				for c.left > 0 && errs[i] == nil {
					if errs[i] = c.fill(); errs[i] == nil {
						errs[i] = store(c, data, begin, 2)
					}
				}
			}
			if !bytes.Equal(fast, general) || fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) {
				t.Fatalf("%s: the loops differ: %v / %v", pt.Name, errs[0], errs[1])
			}
			if patch == badPatch && pt.Name == p.Plan.Tensors[3].Name && (!errors.Is(errs[0], ErrMalformed) || !strings.Contains(errs[0].Error(), pt.Name)) {
				t.Errorf("%s: bad index gave %v", pt.Name, errs[0])
			}
		}
	}
}

// TestPageWriteSplits: the page write gives the result bytes however the file is cut into
// goroutines' ranges (page boundaries inside tensors) and chunks (smaller than a page, not a
// divisor of it), writes only the pages that hold a change, and counts every change.
func TestPageWriteSplits(t *testing.T) {
	base, result, _, p := bigTestPatch(t)
	const name = "model.safetensors"
	changedPages := 0
	for i := 0; i < len(base); i += pageSize {
		end := min(len(base), i+pageSize)
		if !bytes.Equal(base[i:end], result[i:end]) {
			changedPages++
		}
	}
	for _, workers := range []int{1, 2, 3, 7} {
		for _, chunk := range []int64{1000, pageSize, 3 * pageSize / 2, mappedChunk} {
			t.Run(fmt.Sprintf("workers%d/chunk%d", workers, chunk), func(t *testing.T) {
				target := &countingTarget{testTarget: openFileTarget(t, base)}
				res, err := applyPatch(p, target, int64(len(base)), name, &memJournal{}, applyConfig{pages: true, workers: workers, chunk: chunk})
				if errors.Is(err, errNoMapping) {
					t.Skip(err)
				}
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(target.bytes(t), result) {
					t.Fatal("patched file differs from the result")
				}
				if res.Method != pagesMethod() || res.ElementsWritten != p.Plan.TotalChanged() {
					t.Errorf("result %+v, want %d elements by %s", res, p.Plan.TotalChanged(), pagesMethod())
				}
				// Every changed page written once; the marker and the restored length are
				// the two writes of the first 8 bytes.
				if res.Method == MethodPages && target.pagesWritten() != changedPages {
					t.Errorf("%d pages written, %d hold a change", target.pagesWritten(), changedPages)
				}
			})
		}
	}
}

// countingTarget records which bytes beyond the first 8 were written.
type countingTarget struct {
	testTarget
	mu      sync.Mutex
	written map[int64]int // page -> writes covering part of it
}

func (c *countingTarget) WriteAt(b []byte, off int64) (int, error) {
	c.mu.Lock()
	if off >= 8 {
		if c.written == nil {
			c.written = map[int64]int{}
		}
		for pg := off / pageSize; pg <= (off+int64(len(b))-1)/pageSize; pg++ {
			c.written[pg]++
		}
	}
	c.mu.Unlock()
	return c.testTarget.WriteAt(b, off)
}

func (c *countingTarget) Fd() uintptr { return c.testTarget.(*fileTarget).Fd() }

func (c *countingTarget) pagesWritten() int { return len(c.written) }
