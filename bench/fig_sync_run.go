package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store/s3"
)

// syncRound is one version written through the trainer's mount and watched on the reader.
type syncRound struct {
	Write  writeStats
	Sealed time.Time
	Ev     syncEvents
}

func (r *syncRound) since(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return t.Sub(r.Write.Start).Seconds()
}

// syncResult is figure 9's measurement: version N checked through the reader mount (no
// follower running), then version N+1 brought into the follower's directory (no reading
// through the mount meanwhile), so that neither competes with the other for the CPU.
type syncResult struct {
	Bytes       int64
	Read        syncRound // version N
	Verified    time.Time
	BroughtFwd  time.Time // newest mtime under the reader's materialized copy
	Follow      syncRound // version N+1
	BaseSeconds float64   // the whole checkpoint over the link
	BaseBytes   int64
}

// sources generates versions from..to of cfg into dir/src-vN and returns their hashes (which
// also leaves them in the page cache).
func (b *bench) syncSources(cfg gen.Config, dir string, from, to int) (map[int]readStats, error) {
	out := map[int]readStats{}
	for v := from; v <= to; v++ {
		src := filepath.Join(dir, fmt.Sprintf("src-v%d", v))
		b.logf("  sync: generating version %d (%s) into %s", v, describeConfig(cfg), src)
		if err := gen.StreamCheckpoint(cfg, v-1, src); err != nil {
			return nil, fmt.Errorf("generate version %d: %w", v, err)
		}
		rs, err := readTree(src, 4<<20, nil)
		if err != nil {
			return nil, err
		}
		out[v] = rs
	}
	return out, nil
}

// syncVersion writes version v from src through the trainer's mount, seals it, and waits
// until done says the round is over, watching the reader (and the follower, if followDir is
// set) meanwhile.
func (b *bench) syncVersion(ctx context.Context, mntW, cacheR, mntR, followDir string, v int, src string, done func() error) (syncRound, error) {
	var r syncRound
	before, err := s3.ReadStatsFile(cacheR)
	if err != nil {
		return r, err
	}
	if err := warmTree(src); err != nil {
		return r, err
	}
	stop := make(chan struct{})
	events := watchSync(cacheR, mntR, followDir, v, before, stop)
	defer func() {
		if stop != nil {
			close(stop)
			<-events
		}
	}()
	b.logf("  sync: version %d through the writer's mount", v)
	vdir := filepath.Join(mntW, gen.VersionDirName(v))
	if err := os.Mkdir(vdir, 0o755); err != nil {
		return r, fmt.Errorf("open version %d: %w", v, err)
	}
	if r.Write, err = writeTree(src, vdir, b.opts.WriteSize, false); err != nil {
		return r, err
	}
	if r.Sealed, err = seal(vdir); err != nil {
		return r, err
	}
	if err := done(); err != nil {
		return r, err
	}
	time.Sleep(2 * syncSample) // the watcher's last sample
	close(stop)
	stop = nil
	r.Ev = <-events
	return r, nil
}

func (b *bench) figSync(ctx context.Context) ([]Row, error) {
	if missing := linkTools(); len(missing) > 0 {
		return []Row{{Figure: "9", Name: "end-to-end sync", Status: StatusSkip,
			Note: "needs " + strings.Join(missing, ", ") + " (iproute2 and util-linux: `make deps`; run as root)"}}, nil
	}
	server, err := s3ServerBinary()
	if err != nil {
		return []Row{{Figure: "9", Name: "end-to-end sync", Status: StatusSkip, Note: err.Error()}}, nil
	}
	cfg, err := configForBytes(b.sz.IngestBytes, deltaHighLR)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.work, "sync")
	defer b.discard(dir)
	const n = 2 // version N; N-1 is 1, N+1 the follower's round
	srcs, err := b.syncSources(cfg, dir, n, n+1)
	if err != nil {
		return nil, err
	}
	srcDir := func(v int) string { return filepath.Join(dir, fmt.Sprintf("src-v%d", v)) }

	l, err := b.setUpLink(ctx)
	if err != nil {
		return nil, err
	}
	defer l.cleanupRun()
	s3, err := b.startS3Server(ctx, server, l.hostIP, filepath.Join(dir, "s3"))
	if err != nil {
		return nil, err
	}
	defer s3.stop()
	defer setAWSEnv(s3)()
	endpoint := "http://" + s3.addr
	storeURL := "s3://" + syncBucket + "/sync"
	s3flags := []string{"--s3-endpoint", endpoint, "--s3-path-style"}
	if _, err := b.weightfsCmd(ctx, append(append([]string{"init"}, s3flags...), storeURL)...); err != nil {
		return nil, err
	}
	mntW, mntR := filepath.Join(dir, "mnt-writer"), filepath.Join(dir, "mnt-reader")
	cacheR, followDir := filepath.Join(dir, "cache-reader"), filepath.Join(dir, "follower")
	writerArgs := append(append([]string{"mount"}, s3flags...), "--cache-dir", filepath.Join(dir, "cache-writer"), storeURL, mntW)
	w, err := b.startDaemon(ctx, "sync-writer", mntW, b.opts.Weightfs, writerArgs...)
	if err != nil {
		return nil, err
	}
	defer w.stop()

	b.logf("  sync: version %d from the generator through the writer's mount", n-1)
	v1 := filepath.Join(mntW, gen.VersionDirName(n-1))
	if err := gen.StreamCheckpoint(cfg, n-2, v1); err != nil {
		return nil, fmt.Errorf("write version %d through the mount: %w", n-1, err)
	}
	if _, err := seal(v1); err != nil {
		return nil, err
	}
	b.logf("  sync: the reader in namespace %s (unshaped while version %d arrives)", l.ns, n-1)
	name, argv := l.inNS(append(append([]string{b.opts.Weightfs, "mount", "--read-only"}, s3flags...), "--cache-dir", cacheR, storeURL, mntR)...)
	r, err := b.startDaemon(ctx, "sync-reader", mntR, name, argv...)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	if err := waitFor(ctx, fmt.Sprintf("the reader serving version %d", n-1), func() bool { return latestIs(mntR, n-1) }); err != nil {
		return nil, err
	}
	if _, err := readTree(filepath.Join(mntR, gen.VersionDirName(n-1)), 4<<20, nil); err != nil {
		return nil, fmt.Errorf("read version %d through the reader: %w", n-1, err)
	}
	if err := l.shape(ctx); err != nil {
		return nil, err
	}
	b.logf("  sync: link shaped to %s", linkRate)

	res := &syncResult{Bytes: srcs[n].Bytes}
	res.Read, err = b.syncVersion(ctx, mntW, cacheR, mntR, "", n, srcDir(n), func() error {
		if err := waitFor(ctx, fmt.Sprintf("the reader serving version %d", n), func() bool { return latestIs(mntR, n) }); err != nil {
			return err
		}
		if _, err := verifyFiles(filepath.Join(mntR, gen.VersionDirName(n)), srcs[n].Hashes); err != nil {
			return err
		}
		res.Verified = time.Now()
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.BroughtFwd = newestMtime(filepath.Join(cacheR, "materialized"))
	b.logf("  sync: version %d verified on the reader %.2f s after its first write", n, res.Read.since(res.Verified))

	b.logf("  sync: the follower, `weightfs follow` of the reader mount (a whole copy of version %d first)", n)
	stopFollower, err := b.startFollower(mntR, followDir)
	if err != nil {
		return nil, err
	}
	defer stopFollower()
	if err := waitFor(ctx, fmt.Sprintf("the follower holding version %d", n), func() bool { return followerHolds(followDir, n) }); err != nil {
		return nil, err
	}
	res.Follow, err = b.syncVersion(ctx, mntW, cacheR, mntR, followDir, n+1, srcDir(n+1), func() error {
		return waitFor(ctx, fmt.Sprintf("the follower holding version %d", n+1), func() bool { return followerHolds(followDir, n+1) })
	})
	if err != nil {
		return nil, err
	}
	b.logf("  sync: version %d in the follower's directory %.2f s after its first write; checking its files", n+1, res.Follow.since(res.Follow.Ev.Follower))
	if _, err := verifyFiles(followDir, srcs[n+1].Hashes); err != nil {
		return nil, fmt.Errorf("the follower's directory: %w", err)
	}
	if err := stopFollower(); err != nil {
		return nil, err
	}

	b.logf("  sync: the baseline, the whole checkpoint over the same link by HTTP")
	copyDir := filepath.Join(dir, "baseline-copy")
	if res.BaseSeconds, res.BaseBytes, err = b.baselineCopy(ctx, l, srcDir(n), copyDir); err != nil {
		return nil, err
	}
	os.RemoveAll(copyDir)
	b.logf("  sync: baseline %.2f s for %s (%.0f Mbit/s)", res.BaseSeconds, humanBytes(res.BaseBytes), float64(res.BaseBytes)*8/res.BaseSeconds/1e6)
	if res.BaseBytes != res.Bytes {
		return nil, fmt.Errorf("baseline copied %d bytes, the checkpoint has %d", res.BaseBytes, res.Bytes)
	}
	if err := r.stop(); err != nil {
		return nil, err
	}
	if err := w.stop(); err != nil {
		return nil, err
	}
	return syncRows(res, cfg), nil
}

// syncRows are figure 9's rows: the total against the baseline, the follower, the breakdown.
func syncRows(r *syncResult, cfg gen.Config) []Row {
	rd, ev, fw := &r.Read, r.Read.Ev, &r.Follow
	phase := func(from, to time.Time) float64 {
		if from.IsZero() || to.IsZero() {
			return 0
		}
		return to.Sub(from).Seconds()
	}
	linkFloor := float64(ev.Objects+ev.Manifests) * 8 / linkRateBits
	breakdown := fmt.Sprintf("write %.2f s, seal %.2f s, poll lag %.2f s, download %.2f s, switch %.2f s (bring-forward %.2f s); then all of N read back and hashed in %.2f s (not counted)",
		rd.Write.WriteSeconds(), phase(rd.Write.LastWrite, rd.Sealed), phase(rd.Sealed, ev.Manifest), phase(ev.Manifest, ev.LastObject),
		phase(ev.LastObject, ev.Latest), phase(ev.LastObject, r.BroughtFwd), phase(ev.Latest, r.Verified))
	detail := map[string]any{
		"bytes": r.Bytes, "write_s": rd.Write.WriteSeconds(), "seal_s": phase(rd.Write.LastWrite, rd.Sealed),
		"poll_lag_s": phase(rd.Sealed, ev.Manifest), "download_s": phase(ev.Manifest, ev.LastObject),
		"switch_s": phase(ev.LastObject, ev.Latest), "verify_s": phase(ev.Latest, r.Verified),
		"bring_forward_end_s": rd.since(r.BroughtFwd), "latest_s": rd.since(ev.Latest), "verified_s": rd.since(r.Verified),
		"reader_object_bytes": ev.Objects, "reader_manifest_bytes": ev.Manifests,
		"follower_s": fw.since(fw.Ev.Follower), "follower_write_seal_s": fw.since(fw.Sealed), "follower_reader_latest_s": fw.since(fw.Ev.Latest),
		"follower_apply_start_s": fw.since(fw.Ev.Applying), "follower_poll_lag_s": phase(fw.Sealed, fw.Ev.Manifest),
		"follower_download_s": phase(fw.Ev.Manifest, fw.Ev.LastObject), "baseline_s": r.BaseSeconds, "link": linkRate, "sample_s": syncSample.Seconds(),
	}
	base := fmt.Sprintf("copy of all %s at %s (HTTP)", humanBytes(r.Bytes), linkRate)
	return []Row{
		{Figure: "9", Name: "sync N: first write -> reader serves N, every byte checked", Measured: rd.since(ev.Latest), Unit: "s",
			Baseline: r.BaseSeconds, BaselineName: base, Goal: ratioAtMost(0.1),
			Note: fmt.Sprintf("%s (%s), S3 store (versitygw) on the trainer's side, reader in another netns, link %s (tc tbf); the clock stops when the reader's `latest` turns to N, which it does only once its copy holds N and it has checked the SHA-256 of every changed file; %s",
				humanBytes(r.Bytes), describeConfig(cfg), linkRate, breakdown),
			Detail: detail},
		{Figure: "9", Name: "  sync N+1: first write -> follower's directory holds it", Measured: fw.since(fw.Ev.Follower), Unit: "s",
			Baseline: r.BaseSeconds, BaselineName: base, Goal: ratioAtMost(0.1),
			Note: fmt.Sprintf("`weightfs follow --interval %v` of the reader mount (a catch-up patch per version, rendered ahead by the reader), alone on the reader; "+
				"write+seal %.2f s, poll lag %.2f s, download %.2f s, the reader's latest is N+1 at %.2f s, the follower applies from %.2f s, its directory holds N+1 at %.2f s; its files checked after",
				followInterval, fw.since(fw.Sealed), phase(fw.Sealed, fw.Ev.Manifest), phase(fw.Ev.Manifest, fw.Ev.LastObject),
				fw.since(fw.Ev.Latest), fw.since(fw.Ev.Applying), fw.since(fw.Ev.Follower))},
		{Figure: "9", Name: "  write + seal (uploads run during the write)", Measured: rd.since(rd.Sealed), Unit: "s",
			Note: fmt.Sprintf("write %.2f s (%.0f MiB/s), seal %.2f s", rd.Write.WriteSeconds(), mibPerSecond(r.Bytes, rd.Write.WriteSeconds()), phase(rd.Write.LastWrite, rd.Sealed))},
		{Figure: "9", Name: "  poll lag (seal -> reader's first manifest GET)", Measured: phase(rd.Sealed, ev.Manifest), Unit: "s",
			Note: fmt.Sprintf("the reader looks at the change hint every 250 ms (a conditional GET; the default for s3:// stores) and lists when it moved; sampled every %v", syncSample)},
		{Figure: "9", Name: "  download (manifest -> last object)", Measured: phase(ev.Manifest, ev.LastObject), Unit: "s",
			Note: fmt.Sprintf("%s of objects and %s of manifests (%.2f%% of the checkpoint); %.2f s at %s",
				humanBytes(ev.Objects), humanBytes(ev.Manifests), 100*float64(ev.Objects+ev.Manifests)/float64(r.Bytes), linkFloor, linkRate)},
		{Figure: "9", Name: "  switch (last object -> latest is N)", Measured: phase(ev.LastObject, ev.Latest), Unit: "s",
			Note: "the reader brings its copy forward and checks it before it shows N (the next row is the part until the last write)"},
		{Figure: "9", Name: "  bring-forward (last object -> last write to the reader's copy)", Measured: phase(ev.LastObject, r.BroughtFwd), Unit: "s",
			Note: "newest mtime under the reader's CACHE/materialized; the rest of the switch is the check of the copy's files"},
		{Figure: "9", Name: "  after it: all of N read back through the reader mount and hashed", Measured: phase(ev.Latest, r.Verified), Unit: "s",
			Note: fmt.Sprintf("%.0f MiB/s; the bench's own check that the reader serves N as written (an engine's load, which a copy over the link needs as well); not in the total, as the follower's directory is checked after its clock stops; the total with it: %.2f s",
				mibPerSecond(r.Bytes, phase(ev.Latest, r.Verified)), rd.since(r.Verified))},
		{Figure: "9", Name: "  follower: reader's latest is N+1 -> its patch open", Measured: phase(fw.Ev.Latest, fw.Ev.Applying), Unit: "s",
			Note: fmt.Sprintf("the follower's look (MNT/latest every %v) and the rest of the patch's render (the reader renders it as soon as it shows N+1, a follower having looked in patches/)", followInterval)},
		{Figure: "9", Name: "  follower: patch open -> its directory holds N+1 (apply)", Measured: phase(fw.Ev.Applying, fw.Ev.Follower), Unit: "s",
			Note: "delta.ApplyPatchDir: the base's xxh3-128 checked, the changed elements written, the result's checked"},
	}
}
