package delta

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestZZPhases(t *testing.T) {
	size := int64(256 << 20)
	if os.Getenv("ZZ_GIB") != "" {
		size = 1 << 30
	}
	base, result := syntheticVersions(t, size, 0.0097, 1)
	var out memTarget
	if _, err := BuildPatch(&out, 2, 1, []PatchSource{{Name: "m", Base: bytes.NewReader(base), BaseSize: int64(len(base)), Result: bytes.NewReader(result), ResultSize: int64(len(result))}}); err != nil {
		t.Fatal(err)
	}
	p, _ := OpenPatch(bytes.NewReader(out.b), int64(len(out.b)))
	path := filepath.Join(t.TempDir(), "m")
	for _, mode := range []string{"map256K", "two256K", "two64K", "map256K", "two256K", "two64K"} {

		writeSynced(t, path, base)
		f, _ := os.OpenFile(path, os.O_RDWR, 0)
		t0 := time.Now()
		l, lerr := readTargetLayout(p.TensorsOf("m"), f, int64(len(base)), "m", nil)
		if lerr != nil {
			t.Fatal(lerr)
		}
		m, err2 := mapTarget(f, int64(len(base)))
		cfg := applyConfig{chunk: map[string]int64{"two256K": 256 << 10, "two64K": 64 << 10, "map256K": 256 << 10, "map64K": 64 << 10}[mode], sequential: mode == "seq"}
		mm := m
		if mode[:3] == "seq" {
			mm = nil
		}
		t1 := time.Now()
		c1 := cpuNow()
		var s scanResult
		var err error
		if mode[:3] == "two" {
			s, err = scanMapped2(p, l, m.data, digestXXH3, true, cfg.chunk)
		} else {
			s, err = scanTarget(p, l, f, mm, int64(len(base)), digestXXH3, true, cfg)
		}
		t2 := time.Now()
		c2 := cpuNow()
		var res ApplyResult
		err3 := writeMapped(p, l, m, &res, cfg)
		t3 := time.Now()
		c3 := cpuNow()
		m.unmap()
		t4 := time.Now()
		t.Logf("%s: map %v scan %v (%v) write %v (%v) unmap %v; %v %v", mode, t1.Sub(t0), t2.Sub(t1), err, t3.Sub(t2), err3, t4.Sub(t3), s.input, err2)
		t.Logf("   cpu scan %v write %v", c2-c1, c3-c2)
		f.Close()
	}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func scanMapped2(p *Patch, l targetLayout, data []byte, kind digestKind, needInput bool, chunk int64) (res scanResult, err error) {
	out := kind.newHasher()
	buf := make([]byte, chunk)
	var wg sync.WaitGroup
	if needInput {
		in := kind.newHasher()
		wg.Go(func() {
			for off := int64(0); off < int64(len(data)); off += chunk {
				in.Write(data[off:min(off+chunk, int64(len(data)))])
			}
			res.input = in.digest()
		})
	}
	out.Write(l.prefix)
	patcher := newChunkPatcher(p, l.tensors)
	section := data[l.dataStart:]
	for off := int64(0); off < int64(len(section)); off += chunk {
		c := buf[:copy(buf, section[off:])]
		if err := patcher.patch(c, off); err != nil {
			return res, err
		}
		out.Write(c)
	}
	wg.Wait()
	res.output = out.digest()
	return res, nil
}
