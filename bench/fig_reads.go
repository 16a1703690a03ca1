package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/gen"
)

// Figure 4: cold sequential reads (1 MiB read(2) calls) of the latest version through a
// read-only weightfs mount against the loopback mount of the same files, and of a version ten
// deltas behind the latest against the latest. The loopback is measured twice: as go-fuse
// serves it (where the kernel allows, FUSE passthrough: the kernel reads the files itself and
// the daemon never sees a read) and answering every read in the daemon (-no-passthrough: a
// pread and a write per request, what weightfs does short of its checks). Each daemon's CPU
// (user + sys, from /proc) per GB read is reported beside the rates. The store holds 2*10+1 versions, so the old one
// is ten deltas from the latest and ten from the first version (the anchor): whichever whole
// copy a read starts from, it replays ten deltas. Every measurement starts a fresh daemon (so the
// FUSE caches are cold) and drops the kernel's caches after the mount is up; every read is
// checked against the hashes of the bytes the generator wrote.

const (
	readSize    = 1 << 20
	readsBehind = 10
)

// readCase is one kind of read measurement.
type readCase struct {
	name string
	args []string // daemon command line after the binary; the mount point is appended
	bin  string
	sub  string // directory under the mount point to read
	want map[string]xxh3.Uint128
}

func (b *bench) figReads(ctx context.Context) ([]Row, error) {
	run, err := b.modelRunFor(ctx, readLR)
	if err != nil {
		return nil, err
	}
	latest := len(run.Versions)
	old := latest - readsBehind
	if old < 1 || run.LastDir == "" {
		return nil, fmt.Errorf("the read store has %d versions; %d are needed", latest, readsBehind+1)
	}
	cases := []readCase{
		{name: "weightfs-latest", bin: b.opts.Weightfs, args: []string{"mount", "--read-only", run.StorePath},
			sub: gen.VersionDirName(latest), want: run.Versions[latest-1].Hashes},
		{name: "weightfs-old", bin: b.opts.Weightfs, args: []string{"mount", "--read-only", run.StorePath},
			sub: gen.VersionDirName(old), want: run.Versions[old-1].Hashes},
		{name: "loopback", bin: b.self, args: []string{"loopback", "-read-only", run.LastDir},
			want: run.Versions[latest-1].Hashes},
		{name: "loopback-daemon", bin: b.self, args: []string{"loopback", "-no-passthrough", "-read-only", run.LastDir},
			want: run.Versions[latest-1].Hashes},
	}
	rates := map[string][]float64{}
	cpu := map[string][]float64{} // daemon CPU-seconds per GB read
	cold := true
	for rep := 0; rep < b.opts.ReadReps; rep++ {
		// Interleaved, so that a burst of load from elsewhere touches every case alike.
		for _, c := range cases {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			st, dropped, used, err := b.coldRead(ctx, c)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", c.name, err)
			}
			cold = cold && dropped
			rates[c.name] = append(rates[c.name], float64(st.Bytes)/(1<<20)/st.Seconds)
			cpu[c.name] = append(cpu[c.name], cpuPerGB(used, st.Bytes))
		}
		b.logf("  reads: pass %d/%d: weightfs latest %.0f MiB/s (%.2f CPU-s/GB), v%d %.0f MiB/s (%.2f), loopback %.0f MiB/s (%.2f), without passthrough %.0f MiB/s (%.2f)",
			rep+1, b.opts.ReadReps, rates["weightfs-latest"][rep], cpu["weightfs-latest"][rep], old, rates["weightfs-old"][rep], cpu["weightfs-old"][rep],
			rates["loopback"][rep], cpu["loopback"][rep], rates["loopback-daemon"][rep], cpu["loopback-daemon"][rep])
	}
	latestRate, oldRate, loopRate, daemonRate := median(rates["weightfs-latest"]), median(rates["weightfs-old"]), median(rates["loopback"]), median(rates["loopback-daemon"])
	note := fmt.Sprintf("median of %d cold reads of %s", b.opts.ReadReps, humanBytes(run.CheckpointBytes))
	if !cold {
		note += "; CACHES NOT DROPPED (not root?): these reads are not cold"
	}
	cpuNote := func(names ...string) string {
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s %.2f", n, median(cpu[n]))
		}
		return "daemon CPU-s/GB: " + strings.Join(parts, ", ")
	}
	detail := map[string]any{"mib_per_s": rates, "daemon_cpu_s_per_gb": cpu, "bytes": run.CheckpointBytes, "model": describeConfig(run.Cfg), "cold": cold}
	return []Row{
		{Figure: "4", Name: fmt.Sprintf("read latest (v%d), cold", latest), Measured: latestRate, Unit: "MiB/s",
			Baseline: loopRate, BaselineName: "loopback FUSE", Goal: ratioAtLeast(0.8),
			Note: note + "; " + cpuNote("weightfs-latest", "loopback"), Detail: detail},
		{Figure: "4", Name: "  the same against the loopback answering every read in the daemon (no passthrough)", Measured: latestRate, Unit: "MiB/s",
			Baseline: daemonRate, BaselineName: "loopback FUSE, -no-passthrough", Note: cpuNote("weightfs-latest", "loopback-daemon")},
		{Figure: "4", Name: fmt.Sprintf("read v%d (%d deltas behind v%d), cold", old, readsBehind, latest), Measured: oldRate, Unit: "MiB/s",
			Baseline: latestRate, BaselineName: "latest", Goal: ratioAtLeast(0.9), Note: note + "; " + cpuNote("weightfs-old", "weightfs-latest")},
	}, nil
}

// coldRead mounts c, drops the caches, reads c.sub with readSize reads (checking the bytes)
// and unmounts. dropped says whether the caches could be dropped; used is the daemon's CPU
// during the read.
func (b *bench) coldRead(ctx context.Context, c readCase) (readStats, bool, cpuTime, error) {
	mnt := filepath.Join(b.work, "mnt-read")
	d, err := b.startDaemon(ctx, "read-"+c.name, mnt, c.bin, append(c.args, mnt)...)
	if err != nil {
		return readStats{}, false, cpuTime{}, err
	}
	dropped := dropCaches() == nil
	before, cerr := readCPU(d.Pid())
	st, err := readTree(filepath.Join(mnt, c.sub), readSize, c.want)
	after, aerr := readCPU(d.Pid())
	if serr := d.stop(); err == nil {
		err = serr
	}
	if err == nil && (cerr != nil || aerr != nil) {
		err = fmt.Errorf("daemon CPU: %w", errors.Join(cerr, aerr))
	}
	return st, dropped, after.sub(before), err
}

// joinFloats formats each of v with format, comma-separated.
func joinFloats(v []float64, format string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, ", ")
}

// median of a non-empty list (the mean of the middle two for an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
