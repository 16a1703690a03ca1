package store

import (
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
)

// BenchmarkKeptStoreRead is figure 4 in process, on a store the bench kept (`go run ./bench
// -only reads -keep`; WEIGHTFS_BENCH_STORE=WORK/model-lr1e-06/store): each iteration opens a
// fresh reader of it (its own cache directory; the copy of the latest version built before
// the measurement, then the kernel's caches dropped when run as root), reads every file of
// the latest version and of the version ten behind it (WEIGHTFS_BENCH_BEHIND) in order, 1 MiB
// at a time through ReadSlices (the mount's path, FUSE left out), and reports the process's
// CPU (user + sys, every goroutine: builders, checks, file copies) per GB read, the wall time
// per GB (secondary: the machine is shared, docs/benchmarks.md), the delta blocks decoded per
// read, the pages missed in the cache (built, or waited for), the share of the bytes whose
// check the read-ahead started (checkAhead), and the bytes and objects allocated per GB read
// (runtime.MemStats: every goroutine's).
// WEIGHTFS_BENCH_CACHE_BYTES sets Options.CacheBytes (the page cache is an eighth of it).
// WEIGHTFS_BENCH_READ=old (or latest) reads that version only; WEIGHTFS_BENCH_PROFILE=FILE
// writes CPU profiles of the reads alone (FILE.1, FILE.2, ...: not of Open, which builds the
// copy).
func BenchmarkKeptStoreRead(b *testing.B) {
	root := os.Getenv("WEIGHTFS_BENCH_STORE")
	if root == "" {
		b.Skip("WEIGHTFS_BENCH_STORE names no store")
	}
	behind := uint64(10)
	if s := os.Getenv("WEIGHTFS_BENCH_BEHIND"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		behind = n
	}
	profiling := func(bool) {}
	var cpu = map[string]time.Duration{}
	var bytes = map[string]int64{}
	var allocBytes, allocs = map[string]uint64{}, map[string]uint64{}
	only := os.Getenv("WEIGHTFS_BENCH_READ")
	if path := os.Getenv("WEIGHTFS_BENCH_PROFILE"); path != "" {
		n := 0
		var prof *os.File
		profiling = func(on bool) {
			if !on {
				pprof.StopCPUProfile()
				prof.Close()
				return
			}
			n++
			var err error
			if prof, err = os.Create(path + "." + strconv.Itoa(n)); err != nil {
				b.Fatal(err)
			}
			pprof.StartCPUProfile(prof)
		}
	}
	var decoded, built, ahead int64
	var wall = map[string]time.Duration{}
	for range b.N {
		opts := Options{ReadOnly: true, Materialize: true, CacheDir: b.TempDir(), Logger: logtest.New(func(string, ...any) {})}
		if s := os.Getenv("WEIGHTFS_BENCH_CACHE_BYTES"); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			opts.CacheBytes = n // the read cache (Options.CacheBytes): pages get an eighth
		}
		if os.Getenv("WEIGHTFS_BENCH_NO_FILE_COPIES") != "" {
			opts.FileCopyBytes = -1 // reads of the old version replay, no copy written behind them
		}
		r, err := Open(root, opts)
		if err != nil {
			b.Fatal(err)
		}
		latest, ok := r.Latest()
		if !ok || latest <= behind {
			b.Fatalf("the store's latest version is %d; %d behind it is needed", latest, behind)
		}
		dropCachesIfRoot()
		for _, c := range []struct {
			name string
			v    uint64
		}{{"old", latest - behind}, {"latest", latest}} {
			if only != "" && only != c.name {
				continue
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			profiling(true)
			d0, c0, t0 := r.objects.bufs.decoded.Load(), processCPU(), time.Now()
			p0, a0 := r.objects.stats.pageMisses.Load(), r.objects.ra.aheadBytes.Load()
			bytes[c.name] += readVersionSlices(b, r, c.v)
			r.objects.ra.wait()
			r.files.bg.Wait() // the file copies written behind the reads
			cpu[c.name] += processCPU() - c0
			wall[c.name] += time.Since(t0)
			profiling(false)
			runtime.ReadMemStats(&m1)
			allocBytes[c.name] += m1.TotalAlloc - m0.TotalAlloc
			allocs[c.name] += m1.Mallocs - m0.Mallocs
			if c.name == "old" {
				decoded += r.objects.bufs.decoded.Load() - d0
				built += r.objects.stats.pageMisses.Load() - p0
				ahead += r.objects.ra.aheadBytes.Load() - a0
			}
		}
		if err := r.Close(); err != nil {
			b.Fatal(err)
		}
	}
	for name, d := range cpu {
		gb := float64(bytes[name]) / 1e9
		b.ReportMetric(d.Seconds()/gb, name+"-CPU-s/GB")
		b.ReportMetric(wall[name].Seconds()/gb, name+"-wall-s/GB")
		b.ReportMetric(float64(allocBytes[name])/1e6/gb, name+"-alloc-MB/GB")
		b.ReportMetric(float64(allocs[name])/gb, name+"-allocs/GB")
	}
	b.ReportMetric(float64(decoded)/float64(b.N), "blocks-decoded/old-read")
	b.ReportMetric(float64(built)/float64(b.N), "page-misses/old-read")
	if bytes["old"] > 0 {
		b.ReportMetric(float64(ahead)/float64(bytes["old"]), "old-checked-ahead-share")
	}
}

// readVersionSlices reads every file of version v in order of path, 1 MiB at a time through
// ReadSlices, and returns the bytes read.
func readVersionSlices(b *testing.B, r *Store, v uint64) int64 {
	ver, err := r.versions.sealedVersion(v)
	if err != nil {
		b.Fatal(err)
	}
	paths := make([]string, 0, len(ver.files))
	for p := range ver.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	buf := make([]byte, 1<<20)
	var total int64
	for _, p := range paths {
		f, err := r.OpenFile(v, p)
		if err != nil {
			b.Fatal(err)
		}
		for off := int64(0); off < f.Size(); {
			_, release, n, err := f.(SliceReader).ReadSlices(buf, off)
			release()
			if n == 0 {
				b.Fatalf("%s of version %d at %d: %v", p, v, off, err)
			}
			off += int64(n)
		}
		total += f.Size()
		f.Close()
	}
	return total
}

// processCPU is the CPU time (user + sys) of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dropCachesIfRoot empties the kernel's page cache when the process may (root), so that the
// reads find the copy cold as a fresh mount's do.
func dropCachesIfRoot() {
	if os.Geteuid() != 0 {
		return
	}
	syscall.Sync()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}
