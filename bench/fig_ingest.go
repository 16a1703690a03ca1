package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/weightfs/weightfs/gen"
)

// Figures 2, 3 and 5: a checkpoint written through the read-write mount of a `weightfs mount`
// daemon and sealed with DONE, against the same writer on go-fuse's loopback mount and on the
// local disk (with fsync); the seal's latency; the daemon's peak anonymous memory meanwhile.
//
// Version 1 is written straight from the generator into the mount (it only sets the stage);
// version 2, the measured one, is generated into a local directory first and copied by
// writeTree in every case, its source in the page cache and the caches dropped before.
// Figure 2 ingests three times, each time into a fresh store: twice with one writer, and
// between them once with two writers at once (one shard each); it writes the loopback baseline
// three times: the loopback's speed on these VMs moves between runs by up to 6x (fresh memory
// for its page cache, docs/benchmarks.md), so both sides report their median and list every
// run. The daemon's CPU time (user + system, /proc/PID/stat) is read before version 2's first
// create, after its seal, and once the daemon is idle again (its materialized copy brought to
// version 2: work the seal leaves to the background, on the trainer's node all the same), and
// reported per GB of checkpoint; with the write's wall time it says how many cores the daemon
// kept busy, which shows whether two writers at once use both cores better than a wall-clock
// ratio on a shared machine can.

const rssInterval = 50 * time.Millisecond

// ingestStep is one measured version written through the mount and sealed.
type ingestStep struct {
	Version     int
	Write       writeStats
	SealSeconds float64 // from the last write's return to DONE's close returning
	Peak        rssPeak
	Writers     int     // files written at once
	CPU         cpuTime // the daemon's, from just before the first create to the seal's return
	// CPUToIdle is the daemon's CPU from just before the first create until it is idle again
	// (idleWindow without CPU), IdleSeconds how long after the seal that was.
	CPUToIdle   cpuTime
	IdleSeconds float64
	cold        bool    // the caches were dropped before
	cpuBefore   cpuTime // the daemon's CPU before the first create
	// Disk is what the machine's disks moved from the first create to the seal (diskOK: it
	// could be read).
	Disk   diskIO
	diskOK bool
}

// Cores is how many cores the daemon kept busy from the first create to the seal.
func (s ingestStep) Cores() float64 {
	if t := s.Seconds(); t > 0 {
		return s.CPU.Seconds() / t
	}
	return 0
}

// Seconds is the time from the first create to the seal's return.
func (s ingestStep) Seconds() float64 { return s.Write.WriteSeconds() + s.SealSeconds }

// ingestResult is one ingest of versions 1 and 2 through a weightfs daemon.
type ingestResult struct {
	Cfg        gen.Config
	Bytes      int64 // bytes of version 2's files
	V1Seconds  float64
	V1Peak     rssPeak
	V2         ingestStep
	VmHWM      int64
	CachesCold bool
	// CPUToExit is the daemon's CPU from just before version 2's first create to its exit:
	// the seal's CPU plus what the daemon does after it (bringing its copy forward).
	CPUToExit  cpuTime
	dir, srcV2 string
}

// Peak is the higher RssAnon peak of the two versions.
func (r *ingestResult) Peak() int64 { return max(r.V1Peak.RssAnon, r.V2.Peak.RssAnon) }

// ingestWeightfs generates version 2 of cfg into a local directory (unless an earlier run
// did), mounts a fresh store, writes version 1 from the generator and version 2 with
// writeTree through the mount, sealing each, and samples the daemon's memory throughout. The
// store is removed afterwards; the source of version 2 stays for the baselines until
// removeSources.
func (b *bench) ingestWeightfs(ctx context.Context, name string, cfg gen.Config, writers int) (*ingestResult, error) {
	dir := filepath.Join(b.work, name)
	res := &ingestResult{Cfg: cfg, dir: dir, srcV2: filepath.Join(dir, "src-v2")}
	done := res.srcV2 + ".done" // beside the source: writeTree copies everything in it
	if _, err := os.Stat(done); err != nil {
		b.logf("  %s: generating version 2 (%s) into %s", name, describeConfig(cfg), res.srcV2)
		if err := gen.StreamCheckpoint(cfg, 1, res.srcV2); err != nil {
			return nil, fmt.Errorf("generate version 2: %w", err)
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return nil, err
		}
	}
	var err error
	if res.Bytes, err = treeBytes(res.srcV2); err != nil {
		return nil, err
	}
	storePath, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
	if _, err := b.weightfsCmd(ctx, "init", storePath); err != nil {
		return nil, err
	}
	defer os.RemoveAll(storePath)
	d, err := b.startDaemon(ctx, name+"-weightfs", mnt, b.opts.Weightfs, append(append([]string{"mount"}, baseMemoryArgs(res.Bytes)...), storePath, mnt)...)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	sampler := startRSSSampler(d.Pid(), rssInterval)
	defer sampler.Stop()

	b.logf("  %s: version 1 from the generator through the mount", name)
	began := time.Now()
	v1 := filepath.Join(mnt, gen.VersionDirName(1))
	if err := gen.StreamCheckpoint(cfg, 0, v1); err != nil {
		return nil, fmt.Errorf("write version 1 through the mount: %w", err)
	}
	if _, err := seal(v1); err != nil {
		return nil, err
	}
	res.V1Seconds = time.Since(began).Seconds()
	res.V1Peak = sampler.Phase()

	if res.V2, err = b.writeVersion(ctx, name, d, 2, res.srcV2, sampler, writers); err != nil {
		return nil, err
	}
	res.CachesCold = res.V2.cold
	// The daemon is idle (writeVersion waited for it): its memory is measured before it
	// exits, since a process on its way out has a status without its memory lines.
	_, res.VmHWM, err = sampler.Stop()
	if err != nil {
		return nil, fmt.Errorf("sample the daemon's memory: %w", err)
	}
	if err := d.stop(); err != nil {
		return nil, err
	}
	if ps := d.cmd.ProcessState; ps != nil {
		total := cpuTime{User: ps.UserTime(), Sys: ps.SystemTime()}
		res.CPUToExit = total.sub(res.V2.cpuBefore)
	}
	return res, nil
}

// writeVersion writes src as version v through the mount of d, with the caches dropped and src
// warm, by writers writers at once, and seals it; it reads the daemon's CPU time before the
// first create and after the seal.
func (b *bench) writeVersion(ctx context.Context, name string, d *daemon, v int, src string, sampler *rssSampler, writers int) (ingestStep, error) {
	mnt := d.mnt
	out := ingestStep{Version: v, Writers: max(writers, 1)}
	out.cold = dropCaches() == nil
	if err := warmTree(src); err != nil {
		return out, err
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	b.logf("  %s: version %d through the mount, %d writer(s)", name, v, out.Writers)
	sampler.Phase()
	var err error
	if out.cpuBefore, err = readCPU(d.Pid()); err != nil {
		return out, err
	}
	diskBefore, diskOK := readDiskIO()
	dir := filepath.Join(mnt, gen.VersionDirName(v))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return out, fmt.Errorf("open version %d: %w", v, err)
	}
	if out.Write, err = writeTreeConcurrent(src, dir, b.opts.WriteSize, out.Writers, false); err != nil {
		return out, err
	}
	sealed, err := seal(dir)
	if err != nil {
		return out, err
	}
	after, err := readCPU(d.Pid())
	if err != nil {
		return out, err
	}
	out.CPU = after.sub(out.cpuBefore)
	if diskAfter, ok := readDiskIO(); ok && diskOK {
		out.Disk, out.diskOK = diskAfter.sub(diskBefore), true
	}
	out.SealSeconds = sealed.Sub(out.Write.LastWrite).Seconds()
	idle, idleAt, err := waitIdle(ctx, d.Pid(), after, sealed)
	if err != nil {
		return out, err
	}
	out.CPUToIdle = idle.sub(out.cpuBefore)
	out.IdleSeconds = idleAt.Sub(sealed).Seconds()
	out.Peak = sampler.Phase()
	if err := checkSealed(mnt, v, src); err != nil {
		return out, err
	}
	b.logf("  %s: v%d written in %.1f s (%.1f MiB/s), sealed %.2f s later; daemon CPU %.2f + %.2f s (%.2f CPU-s/GB, %.2f cores), %.2f CPU-s/GB once idle (%.1f s after the seal); peak RssAnon %s", name, v,
		out.Write.WriteSeconds(), mibPerSecond(out.Write.Bytes, out.Seconds()), out.SealSeconds,
		out.CPU.User.Seconds(), out.CPU.Sys.Seconds(), cpuPerGB(out.CPU, out.Write.Bytes), out.Cores(),
		cpuPerGB(out.CPUToIdle, out.Write.Bytes), out.IdleSeconds, humanBytes(out.Peak.RssAnon))
	return out, nil
}

// idleWindow is how long the daemon's CPU time must stand still (within a clock tick) for it
// to count as idle; idleTimeout bounds the wait.
const (
	idleWindow  = 500 * time.Millisecond
	idleTimeout = 2 * time.Minute
)

// waitIdle waits until process pid has used no CPU (beyond one clock tick) for idleWindow,
// starting from its CPU time last read at since, and returns its CPU time then and when it
// last used CPU.
func waitIdle(ctx context.Context, pid int, last cpuTime, since time.Time) (cpuTime, time.Time, error) {
	const tick = 10 * time.Millisecond // USER_HZ
	changed := since
	quiet := last
	for start := time.Now(); time.Since(start) < idleTimeout; {
		select {
		case <-ctx.Done():
			return last, changed, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		now, err := readCPU(pid)
		if err != nil {
			return last, changed, err
		}
		if now.sub(last).User+now.sub(last).Sys > 0 {
			last = now
		}
		if now.sub(quiet).User+now.sub(quiet).Sys > tick {
			quiet, changed = now, time.Now()
		} else if time.Since(changed) >= idleWindow {
			return last, changed, nil
		}
	}
	return last, changed, fmt.Errorf("process %d did not go idle within %v of its seal", pid, idleTimeout)
}

// removeSources deletes what ingestWeightfs left for the baselines.
func (r *ingestResult) removeSources() error { return os.RemoveAll(r.dir) }

// seal creates DONE in an open version and returns when its close has returned: the moment
// the store says the version is durable.
func seal(versionDir string) (time.Time, error) {
	f, err := os.Create(filepath.Join(versionDir, "DONE"))
	if err != nil {
		return time.Time{}, fmt.Errorf("seal %s: create DONE: %w", versionDir, err)
	}
	if err := f.Close(); err != nil {
		return time.Time{}, fmt.Errorf("seal %s: close DONE: %w", versionDir, err)
	}
	return time.Now(), nil
}

// checkSealed checks that latest names version v and that its files have the sizes of src's.
func checkSealed(mnt string, v int, src string) error {
	target, err := os.Readlink(filepath.Join(mnt, "latest"))
	if err != nil {
		return fmt.Errorf("after the seal: %w", err)
	}
	if filepath.Base(target) != gen.VersionDirName(v) {
		return fmt.Errorf("after the seal of version %d, latest points to %s", v, target)
	}
	files, err := treeFiles(src)
	if err != nil {
		return err
	}
	for _, rel := range files {
		want, err := os.Stat(filepath.Join(src, rel))
		if err != nil {
			return err
		}
		got, err := os.Stat(filepath.Join(mnt, gen.VersionDirName(v), rel))
		if err != nil {
			return fmt.Errorf("sealed version %d: %w", v, err)
		}
		if got.Size() != want.Size() {
			return fmt.Errorf("sealed version %d: %s has %d bytes, %d were written", v, rel, got.Size(), want.Size())
		}
	}
	return nil
}

// weightfsCmd runs a short weightfs command and returns its standard output; its output is in
// the error if it fails.
func (b *bench) weightfsCmd(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.opts.Weightfs, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("weightfs %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)+stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// baselineWrite writes src with writeTree into a fresh directory: through a loopback mount of
// a local directory, or (local) onto the local disk with fsync.
// disk is what the machine's disks moved meanwhile (zero where /proc has no counters).
func (b *bench) baselineWrite(ctx context.Context, res *ingestResult, local bool) (ws writeStats, disk diskIO, err error) {
	under := filepath.Join(res.dir, "baseline")
	if err := os.MkdirAll(under, 0o755); err != nil {
		return writeStats{}, disk, err
	}
	defer os.RemoveAll(under)
	target := under
	var d *daemon
	if !local {
		mnt := filepath.Join(res.dir, "mnt-loopback")
		if d, err = b.startDaemon(ctx, "ingest-loopback", mnt, b.self, "loopback", under, mnt); err != nil {
			return writeStats{}, disk, err
		}
		defer d.stop()
		target = mnt
	}
	dropCaches()
	if err := warmTree(res.srcV2); err != nil {
		return writeStats{}, disk, err
	}
	before, diskOK := readDiskIO()
	ws, err = writeTree(res.srcV2, filepath.Join(target, gen.VersionDirName(2)), b.opts.WriteSize, local)
	if err != nil {
		return ws, disk, err
	}
	if after, ok := readDiskIO(); ok && diskOK {
		disk = after.sub(before)
	}
	if d != nil {
		if err := d.stop(); err != nil {
			return ws, disk, err
		}
	}
	return ws, disk, nil
}

// diskField is one of the disk counters of each one-writer run (nil where they were not read).
func diskField(runs []*ingestResult, f func(diskIO) float64) []float64 {
	var out []float64
	for _, r := range runs {
		if !r.V2.diskOK {
			return nil
		}
		out = append(out, f(r.V2.Disk))
	}
	return out
}

// describeDisks says what the disks moved while weightfs ingested version 2 (each one-writer
// run) and while the baseline wrote it with fsync: weightfs reads the previous version's copy
// (the base it diffs against) and writes the new version's (its seed), on the same disk.
func describeDisks(runs []*ingestResult, local writeStats, localDisk diskIO) string {
	var parts []string
	for _, r := range runs {
		st := r.V2
		if !st.diskOK {
			return "the disks' counters could not be read"
		}
		parts = append(parts, fmt.Sprintf("read %s, written %s, iowait %.1f CPU-s in %.1f s",
			humanBytes(st.Disk.Read), humanBytes(st.Disk.Written), st.Disk.IOWait.Seconds(), st.Seconds()))
	}
	return fmt.Sprintf("the disks (/proc/diskstats, whole disks) while weightfs ingested v2, first create -> seal: %s (the base read from the copy, the new version's copy written beside it); "+
		"while write+fsync wrote it: read %s, written %s, iowait %.1f CPU-s in %.1f s",
		strings.Join(parts, "; "), humanBytes(localDisk.Read), humanBytes(localDisk.Written), localDisk.IOWait.Seconds(), local.TotalSeconds())
}

func mibPerSecond(bytes int64, seconds float64) float64 { return float64(bytes) / (1 << 20) / seconds }

// ingestWriters are figure 2's ingests, in order: each a fresh store, version 1, then version 2
// written by this many writers at once. The one-writer runs give the figure (their median);
// the two-writer run, between them, shows whether two shards written at once use both cores.
// loopbackRuns is how many times the loopback writes the same files.
var ingestWriters = []int{1, 2, 1}

const loopbackRuns = 3

// ingestShards is how many safetensors files figure 2's checkpoint has: two, so that two
// writers each have one.
const ingestShards = 2

func (b *bench) figIngest(ctx context.Context) ([]Row, error) {
	cfg, err := configForBytes(b.sz.IngestBytes, deltaHighLR)
	if err != nil {
		return nil, err
	}
	cfg.Shards = ingestShards
	var runs, twos []*ingestResult
	for i, w := range ingestWriters {
		b.logf("  ingest: run %d of %d (%d writer(s))", i+1, len(ingestWriters), w)
		res, err := b.ingestWeightfs(ctx, "ingest", cfg, w)
		if err != nil {
			return nil, err
		}
		if w == 1 {
			runs = append(runs, res)
		} else {
			twos = append(twos, res)
		}
	}
	res := runs[0]
	defer res.removeSources()
	b.ingest2 = res
	var loops []float64
	for i := 1; i <= loopbackRuns; i++ {
		b.logf("  ingest: the same writer through the loopback mount (%d of %d)", i, loopbackRuns)
		loop, _, err := b.baselineWrite(ctx, res, false)
		if err != nil {
			return nil, fmt.Errorf("loopback baseline: %w", err)
		}
		loops = append(loops, mibPerSecond(loop.Bytes, loop.TotalSeconds()))
		b.logf("  ingest: loopback %.1f MiB/s", loops[len(loops)-1])
	}
	b.logf("  ingest: the same writer onto the local disk, with fsync")
	local, localDisk, err := b.baselineWrite(ctx, res, true)
	if err != nil {
		return nil, fmt.Errorf("local-disk baseline: %w", err)
	}
	var rates, seals, writes, cpus, cpusIdle, cpusExit, idles, cores, twoRates, twoCPUs, twoCPUsIdle, twoCores []float64
	cold := true
	for _, r := range runs {
		st := r.V2
		rates = append(rates, mibPerSecond(r.Bytes, st.Seconds()))
		seals = append(seals, st.SealSeconds)
		writes = append(writes, st.Write.WriteSeconds())
		cpus = append(cpus, cpuPerGB(st.CPU, r.Bytes))
		cpusIdle = append(cpusIdle, cpuPerGB(st.CPUToIdle, r.Bytes))
		cpusExit = append(cpusExit, cpuPerGB(r.CPUToExit, r.Bytes))
		idles = append(idles, st.IdleSeconds)
		cores = append(cores, st.Cores())
		cold = cold && r.CachesCold
	}
	for _, r := range twos {
		twoRates = append(twoRates, mibPerSecond(r.Bytes, r.V2.Seconds()))
		twoCPUs = append(twoCPUs, cpuPerGB(r.V2.CPU, r.Bytes))
		twoCPUsIdle = append(twoCPUsIdle, cpuPerGB(r.V2.CPUToIdle, r.Bytes))
		twoCores = append(twoCores, r.V2.Cores())
		cold = cold && r.CachesCold
	}
	note := fmt.Sprintf("%s (%s, %d shards), %d-byte writes; weightfs counts until DONE's close returns, loopback until the last close (no fsync); "+
		"medians: weightfs of %d runs (%s MiB/s), loopback of %d (%s MiB/s)",
		humanBytes(res.Bytes), describeConfig(cfg), cfg.Shards, b.opts.WriteSize, len(runs), joinFloats(rates, "%.0f"), len(loops), joinFloats(loops, "%.0f"))
	if !cold {
		note += "; caches could not be dropped between cases"
	}
	detail := map[string]any{
		"bytes": res.Bytes, "weightfs_mib_s": rates, "weightfs_write_s": writes, "weightfs_seal_s": seals,
		"loopback_mib_s": loops, "local_fsync_s": local.TotalSeconds(), "v1_seconds": res.V1Seconds, "runs": len(runs),
		"cpu_s_per_gb": cpus, "cpu_s_per_gb_to_idle": cpusIdle, "idle_s_after_seal": idles, "cpu_s_per_gb_to_exit": cpusExit, "cores": cores,
		"disk_read_bytes":             diskField(runs, func(d diskIO) float64 { return float64(d.Read) }),
		"disk_written_bytes":          diskField(runs, func(d diskIO) float64 { return float64(d.Written) }),
		"disk_iowait_s":               diskField(runs, func(d diskIO) float64 { return d.IOWait.Seconds() }),
		"local_fsync_disk_read_bytes": localDisk.Read, "local_fsync_disk_written_bytes": localDisk.Written,
		"two_writers_mib_s": twoRates, "two_writers_cpu_s_per_gb": twoCPUs, "two_writers_cpu_s_per_gb_to_idle": twoCPUsIdle, "two_writers_cores": twoCores,
	}
	wfsRate := median(rates)
	rows := []Row{
		{Figure: "2", Name: "ingest v2 through the mount, sealed", Measured: wfsRate, Unit: "MiB/s",
			Baseline: median(loops), BaselineName: "loopback FUSE", Goal: ratioAtLeast(0.5),
			Note: note, Detail: detail},
		{Figure: "2", Name: "  the same against local disk", Measured: wfsRate, Unit: "MiB/s",
			Baseline: mibPerSecond(local.Bytes, local.TotalSeconds()), BaselineName: "write+fsync (cp+sync)", Goal: ratioAtLeast(1),
			Note: describeDisks(runs, local, localDisk)},
		{Figure: "2", Name: "  daemon CPU per GB of checkpoint (user+sys, first create -> seal)", Measured: median(cpus), Unit: "CPU-s/GB",
			Goal: atMost(1.3, "CPU-s/GB"),
			Note: fmt.Sprintf("GB = 10^9 bytes; /proc/PID/stat of the daemon; medians of %d runs: %s; to the daemon's exit %s",
				len(runs), joinFloats(cpus, "%.2f"), joinFloats(cpusExit, "%.2f"))},
		{Figure: "2", Name: "  daemon CPU per GB, first create -> idle again (copy at v2)", Measured: median(cpusIdle), Unit: "CPU-s/GB",
			Goal: atMost(1.3, "CPU-s/GB"),
			Note: fmt.Sprintf("the honest figure: what the version costs the trainer's node; runs: %s, idle %s s after the seal",
				joinFloats(cpusIdle, "%.2f"), joinFloats(idles, "%.1f"))},
	}
	if len(twoRates) > 0 {
		rows = append(rows, Row{Figure: "2", Name: "  2 writers at once (one shard each) vs 1", Measured: median(twoRates), Unit: "MiB/s",
			Baseline: wfsRate, BaselineName: "1 writer (above)", Goal: ratioAtLeast(1),
			Note: fmt.Sprintf("goal ours (the issue asks to show it): not slower; %s CPU-s/GB with 2 writers (%s once idle); %d CPUs on this machine, load %s",
				joinFloats(twoCPUs, "%.2f"), joinFloats(twoCPUsIdle, "%.2f"), b.machine.CPUs, loadAverage())},
			Row{Figure: "2", Name: "  cores the daemon kept busy, 2 writers vs 1 (CPU-s / wall-s, create -> seal)", Measured: median(twoCores), Unit: "cores",
				Baseline: median(cores), BaselineName: "1 writer", Goal: ratioAtLeast(1),
				Note: fmt.Sprintf("goal ours: two shards at once keep more cores busy than one; 1 writer %s, 2 writers %s; of %d CPUs, load %s",
					joinFloats(cores, "%.2f"), joinFloats(twoCores, "%.2f"), b.machine.CPUs, loadAverage())})
	}
	rows = append(rows, Row{Figure: "3", Name: "seal latency (last write -> DONE closed)", Measured: median(seals), Unit: "s",
		Baseline: median(writes), BaselineName: "write time", Goal: ratioAtMost(0.10),
		Note: fmt.Sprintf("medians of %d runs: seals %s s", len(runs), joinFloats(seals, "%.2f"))})
	return rows, nil
}

func (b *bench) figMemory(ctx context.Context) ([]Row, error) {
	var rows []Row
	var first, last *ingestResult
	for _, size := range b.sz.MemoryBytes {
		res := b.ingest2
		if res == nil || size != b.sz.IngestBytes {
			cfg, err := configForBytes(size, deltaHighLR)
			if err != nil {
				return rows, err
			}
			if res, err = b.ingestWeightfs(ctx, fmt.Sprintf("memory-%dm", size>>20), cfg, 1); err != nil {
				return rows, err
			}
			if err := res.removeSources(); err != nil {
				return rows, err
			}
		}
		if first == nil {
			first = res
		}
		last = res
		rows = append(rows, Row{
			Figure: "5", Name: fmt.Sprintf("daemon peak RssAnon, ingest of %s (v1+v2)", humanBytes(res.Bytes)),
			Measured: float64(res.Peak()) / (1 << 20), Unit: "MiB", Goal: atMost(512, "MiB"),
			Note: fmt.Sprintf("v1 %s, v2 %s; VmHWM (file pages too) %s; sampled every %v",
				humanBytes(res.V1Peak.RssAnon), humanBytes(res.V2.Peak.RssAnon), humanBytes(res.VmHWM), rssInterval),
			Detail: map[string]any{"v1": res.V1Peak, "v2": res.V2.Peak, "vm_hwm_bytes": res.VmHWM, "bytes": res.Bytes},
		})
	}
	if first != nil && last != first && first.Peak() > 0 {
		rows = append(rows, Row{
			Figure: "5", Name: fmt.Sprintf("  peak growth %s -> %s", humanBytes(first.Bytes), humanBytes(last.Bytes)),
			Measured: float64(last.Peak()) / float64(first.Peak()), Unit: "x", Goal: atMost(1.25, "x"),
			Note: "must not grow with model size: at most 1.25x for 4x the bytes",
		})
	}
	return rows, nil
}
