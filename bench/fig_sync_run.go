package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

// syncResult is one measured sync of version N (fig_sync.go).
type syncResult struct {
	Bytes        int64
	Write        writeStats
	Sealed       time.Time
	Ev           syncEvents
	Verified     time.Time
	BroughtFwd   time.Time // newest mtime under the reader's materialized copy
	BaseSeconds  float64   // the whole checkpoint over the link
	BaseBytes    int64
	FollowerRead bool // the follower's files were checked too
}

func (r *syncResult) since(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return t.Sub(r.Write.Start).Seconds()
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
	const n = 2 // version N; N-1 is 1
	src := filepath.Join(dir, "src-v2")
	b.logf("  sync: generating version %d (%s) into %s", n, describeConfig(cfg), src)
	if err := gen.StreamCheckpoint(cfg, n-1, src); err != nil {
		return nil, fmt.Errorf("generate version %d: %w", n, err)
	}
	srcRead, err := readTree(src, 4<<20, nil) // its hashes, and it warms the page cache
	if err != nil {
		return nil, err
	}

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
	stopFollower, err := b.startFollower(mntR, followDir)
	if err != nil {
		return nil, err
	}
	defer stopFollower()
	if err := waitFor(ctx, fmt.Sprintf("the follower holding version %d", n-1), func() bool { return followerHolds(followDir, n-1) }); err != nil {
		return nil, err
	}
	if err := l.shape(ctx); err != nil {
		return nil, err
	}
	b.logf("  sync: link shaped to %s; version %d through the writer's mount", linkRate, n)

	res := &syncResult{Bytes: srcRead.Bytes}
	before, err := store.ReadS3StatsFile(cacheR)
	if err != nil {
		return nil, err
	}
	stop := make(chan struct{})
	events := watchSync(cacheR, mntR, followDir, n, before, stop)
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			<-events
		}
	}()
	vdir := filepath.Join(mntW, gen.VersionDirName(n))
	if err := os.Mkdir(vdir, 0o755); err != nil {
		return nil, fmt.Errorf("open version %d: %w", n, err)
	}
	if res.Write, err = writeTree(src, vdir, b.opts.WriteSize, false); err != nil {
		return nil, err
	}
	if res.Sealed, err = seal(vdir); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, fmt.Sprintf("the reader serving version %d", n), func() bool { return latestIs(mntR, n) }); err != nil {
		return nil, err
	}
	if _, err := verifyFiles(filepath.Join(mntR, gen.VersionDirName(n)), srcRead.Hashes); err != nil {
		return nil, err
	}
	res.Verified = time.Now()
	if err := waitFor(ctx, fmt.Sprintf("the follower holding version %d", n), func() bool { return followerHolds(followDir, n) }); err != nil {
		return nil, err
	}
	time.Sleep(2 * syncSample) // the watcher's last sample
	close(stop)
	stopped = true
	res.Ev = <-events
	res.BroughtFwd = newestMtime(filepath.Join(cacheR, "materialized"))
	b.logf("  sync: version %d verified on the reader %.2f s after its first write; checking the follower's files", n, res.since(res.Verified))
	if _, err := verifyFiles(followDir, srcRead.Hashes); err != nil {
		return nil, fmt.Errorf("the follower's directory: %w", err)
	}
	res.FollowerRead = true
	if err := stopFollower(); err != nil {
		return nil, err
	}

	b.logf("  sync: the baseline, the whole checkpoint over the same link by HTTP")
	copyDir := filepath.Join(dir, "baseline-copy")
	if res.BaseSeconds, res.BaseBytes, err = b.baselineCopy(ctx, l, src, copyDir); err != nil {
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
	ev := r.Ev
	phase := func(from, to time.Time) float64 {
		if from.IsZero() || to.IsZero() {
			return 0
		}
		return to.Sub(from).Seconds()
	}
	linkFloor := float64(ev.Objects+ev.Manifests) * 8 / linkRateBits
	breakdown := fmt.Sprintf("write %.2f s, seal %.2f s, poll lag %.2f s, download %.2f s, switch %.2f s, verifying read %.2f s",
		r.Write.WriteSeconds(), phase(r.Write.LastWrite, r.Sealed), phase(r.Sealed, ev.Manifest), phase(ev.Manifest, ev.LastObject),
		phase(ev.LastObject, ev.Latest), phase(ev.Latest, r.Verified))
	detail := map[string]any{
		"bytes": r.Bytes, "write_s": r.Write.WriteSeconds(), "seal_s": phase(r.Write.LastWrite, r.Sealed),
		"poll_lag_s": phase(r.Sealed, ev.Manifest), "download_s": phase(ev.Manifest, ev.LastObject),
		"switch_s": phase(ev.LastObject, ev.Latest), "verify_s": phase(ev.Latest, r.Verified),
		"bring_forward_end_s": r.since(r.BroughtFwd), "latest_s": r.since(ev.Latest), "verified_s": r.since(r.Verified),
		"follower_s": r.since(ev.Follower), "reader_object_bytes": ev.Objects, "reader_manifest_bytes": ev.Manifests,
		"baseline_s": r.BaseSeconds, "link": linkRate, "sample_s": syncSample.Seconds(),
	}
	base := fmt.Sprintf("copy of all %s at %s (HTTP)", humanBytes(r.Bytes), linkRate)
	return []Row{
		{Figure: "9", Name: "sync N: first write -> reader serves N, every byte checked", Measured: r.since(r.Verified), Unit: "s",
			Baseline: r.BaseSeconds, BaselineName: base, Goal: ratioAtMost(0.1),
			Note: fmt.Sprintf("%s (%s), S3 store (versitygw) on the trainer's side, reader in another netns, link %s (tc tbf); %s",
				humanBytes(r.Bytes), describeConfig(cfg), linkRate, breakdown),
			Detail: detail},
		{Figure: "9", Name: "  first write -> follower's directory holds N", Measured: r.since(ev.Follower), Unit: "s",
			Baseline: r.BaseSeconds, BaselineName: base, Goal: ratioAtMost(0.1),
			Note: fmt.Sprintf("`weightfs follow --interval %v` of the reader mount, running beside the verifying read; its files checked after", followInterval)},
		{Figure: "9", Name: "  write + seal (uploads run during the write)", Measured: r.since(r.Sealed), Unit: "s",
			Note: fmt.Sprintf("write %.2f s (%.0f MiB/s), seal %.2f s", r.Write.WriteSeconds(), mibPerSecond(r.Bytes, r.Write.WriteSeconds()), phase(r.Write.LastWrite, r.Sealed))},
		{Figure: "9", Name: "  poll lag (seal -> reader's first manifest GET)", Measured: phase(r.Sealed, ev.Manifest), Unit: "s",
			Note: fmt.Sprintf("the reader polls every 1 s (the default for s3:// stores); sampled every %v", syncSample)},
		{Figure: "9", Name: "  download (manifest -> last object)", Measured: phase(ev.Manifest, ev.LastObject), Unit: "s",
			Note: fmt.Sprintf("%s of objects and %s of manifests (%.2f%% of the checkpoint); %.2f s at %s",
				humanBytes(ev.Objects), humanBytes(ev.Manifests), 100*float64(ev.Objects+ev.Manifests)/float64(r.Bytes), linkFloor, linkRate)},
		{Figure: "9", Name: "  switch (last object -> latest is N)", Measured: phase(ev.LastObject, ev.Latest), Unit: "s"},
		{Figure: "9", Name: "  bring-forward (latest is N -> last write to the reader's copy)", Measured: phase(ev.Latest, r.BroughtFwd), Unit: "s",
			Note: "newest mtime under the reader's CACHE/materialized; the verifying read runs meanwhile"},
		{Figure: "9", Name: "  verifying read (latest is N -> all of N read and hashed)", Measured: phase(ev.Latest, r.Verified), Unit: "s",
			Note: fmt.Sprintf("%.0f MiB/s through the reader mount", mibPerSecond(r.Bytes, phase(ev.Latest, r.Verified)))},
	}
}
