package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/gen"
)

// Figure 4: cold sequential reads (1 MiB read(2) calls) of the latest version through a
// read-only weightfs mount against the loopback mount of the same files, and of a version ten
// deltas behind the latest against the latest. The store holds 2*10+1 versions, so the old one
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
	}
	rates := map[string][]float64{}
	cold := true
	for rep := 0; rep < b.opts.ReadReps; rep++ {
		// Interleaved, so that a burst of load from elsewhere touches every case alike.
		for _, c := range cases {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			st, dropped, err := b.coldRead(ctx, c)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", c.name, err)
			}
			cold = cold && dropped
			rates[c.name] = append(rates[c.name], float64(st.Bytes)/(1<<20)/st.Seconds)
		}
		b.logf("  reads: pass %d/%d: weightfs latest %.0f MiB/s, v%d %.0f MiB/s, loopback %.0f MiB/s", rep+1, b.opts.ReadReps,
			rates["weightfs-latest"][rep], old, rates["weightfs-old"][rep], rates["loopback"][rep])
	}
	latestRate, oldRate, loopRate := median(rates["weightfs-latest"]), median(rates["weightfs-old"]), median(rates["loopback"])
	note := fmt.Sprintf("median of %d cold reads of %s", b.opts.ReadReps, humanBytes(run.CheckpointBytes))
	if !cold {
		note += "; CACHES NOT DROPPED (not root?): these reads are not cold"
	}
	detail := map[string]any{"mib_per_s": rates, "bytes": run.CheckpointBytes, "model": describeConfig(run.Cfg), "cold": cold}
	return []Row{
		{Figure: "4", Name: fmt.Sprintf("read latest (v%d), cold", latest), Measured: latestRate, Unit: "MiB/s",
			Baseline: loopRate, BaselineName: "loopback FUSE", Goal: ratioAtLeast(0.8), Note: note, Detail: detail},
		{Figure: "4", Name: fmt.Sprintf("read v%d (%d deltas behind v%d), cold", old, readsBehind, latest), Measured: oldRate, Unit: "MiB/s",
			Baseline: latestRate, BaselineName: "latest", Goal: ratioAtLeast(0.5), Note: note},
	}, nil
}

// coldRead mounts c, drops the caches, reads c.sub with readSize reads (checking the bytes)
// and unmounts. dropped says whether the caches could be dropped.
func (b *bench) coldRead(ctx context.Context, c readCase) (readStats, bool, error) {
	mnt := filepath.Join(b.work, "mnt-read")
	d, err := b.startDaemon(ctx, "read-"+c.name, mnt, c.bin, append(c.args, mnt)...)
	if err != nil {
		return readStats{}, false, err
	}
	dropped := dropCaches() == nil
	st, err := readTree(filepath.Join(mnt, c.sub), readSize, c.want)
	if serr := d.stop(); err == nil {
		err = serr
	}
	return st, dropped, err
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
