package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"syscall"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
	"github.com/weightfs/weightfs/store/s3"
)

// figure moe's measurements of one checkpoint (fig_moe.go): the sources, then commit, the
// mount and S3, each on a store of its own, removed when measured.

// moeSources generates versions 1 .. 1+moeSteadyVersions of c.Cfg under c.dir (removed by
// the caller), stepping one model in memory (gen.WriteSeries), and hashes version 2's files.
func (b *bench) moeSources(ctx context.Context, c *moeCase) error {
	c.dir = filepath.Join(b.work, "moe-"+c.Kind)
	out := filepath.Join(c.dir, "src")
	b.logf("  moe: %s: generating versions 1-%d (%d tensors, %s)", c.Kind, 1+moeSteadyVersions, c.Tensors, describeConfig(c.Cfg))
	err := gen.WriteSeries(gen.SeriesOptions{Config: c.Cfg, Out: out, Start: 1, Versions: 1 + moeSteadyVersions}, func(r gen.VersionReport) error {
		c.srcs = append(c.srcs, r.Dir)
		return ctx.Err()
	})
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	rs, err := readTree(c.srcs[1], 4<<20, nil)
	if err != nil {
		return err
	}
	c.Bytes, c.hashes2 = rs.Bytes, rs.Hashes
	return nil
}

// firstTwo is versions 1 and 2 of c's sources, which commit and S3 measure.
func (c *moeCase) firstTwo() [2]string { return [2]string{c.srcs[0], c.srcs[1]} }

// filesUnder counts the regular files under dir (0 if there is no dir).
func filesUnder(dir string) (int, error) {
	n, err := countFiles(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	return n, err
}

// objectsAndPacks counts the object files and pack files of a store's layout under root.
func objectsAndPacks(root string) (objects, packs int, err error) {
	if objects, err = filesUnder(filepath.Join(root, "objects")); err != nil {
		return 0, 0, err
	}
	packs, err = filesUnder(filepath.Join(root, "packs"))
	return objects, packs, err
}

// selfCPU is this process's CPU time (user + system).
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// moeCommit commits version 1 and then, measured, version 2 into a fresh local store in this
// process (store.Commit, what `weightfs commit` calls), reading the store's Stats around it.
func (b *bench) moeCommit(dir, kind string, srcs [2]string) (moeLocal, error) {
	var out moeLocal
	root := filepath.Join(dir, "store-commit")
	defer b.discard(root)
	if err := location.Init(root, false, location.Options{}); err != nil {
		return out, err
	}
	st, err := location.Open(root, location.Options{})
	if err != nil {
		return out, err
	}
	defer st.Close()
	b.logf("  moe: %s: commit of version 1", kind)
	if _, err := st.Commit(srcs[0], store.CommitOptions{}); err != nil {
		return out, err
	}
	objs, packs, err := objectsAndPacks(root)
	if err != nil {
		return out, err
	}
	dropCaches()
	if err := warmTree(srcs[1]); err != nil {
		return out, err
	}
	b.logf("  moe: %s: commit of version 2", kind)
	before, cpu := st.Stats(), selfCPU()
	began := time.Now()
	if _, err := st.Commit(srcs[1], store.CommitOptions{}); err != nil {
		return out, err
	}
	out.Wall, out.CPU = time.Since(began).Seconds(), selfCPU()-cpu
	after := st.Stats()
	out.Fsyncs, out.IndexWrites = after.Fsyncs-before.Fsyncs, after.IndexWrites-before.IndexWrites
	o2, p2, err := objectsAndPacks(root)
	out.Objects, out.Packs = o2-objs, p2-packs
	b.logf("  moe: %s: commit of version 2 in %.2f s, %.2f CPU-s; %d fsyncs + %d index writes; %d object files, %d packs",
		kind, out.Wall, out.CPU, out.Fsyncs, out.IndexWrites, out.Objects, out.Packs)
	if err != nil {
		return out, err
	}
	return out, st.Close()
}

// moeWait bounds a wait for a reader to catch up with a version of 20,000 objects.
const moeWait = 20 * time.Minute

// waitLong is waitFor with moeWait.
func waitLong(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(moeWait)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v", what, moeWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(syncSample):
		}
	}
	return nil
}

// freeAddr is a free loopback address for a daemon's metrics endpoint.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// scrapeSyncs reads a daemon's store fsyncs and index writes from its metrics endpoint.
func scrapeSyncs(addr string) (fsyncs, indexWrites int64, err error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	f, ok1 := metricValue(string(body), "weightfs_fsyncs_total")
	w, ok2 := metricValue(string(body), "weightfs_index_writes_total")
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("metrics at %s: no weightfs_fsyncs_total or weightfs_index_writes_total", addr)
	}
	return int64(f), int64(w), nil
}

// moeS3 writes version 1 through a writer mount on an S3 store, starts a read-only mount
// and waits until it serves version 1, then writes version 2 and measures both mounts'
// requests (their S3 counters, CACHE/s3-stats.json) and the time from the seal to the
// reader's latest naming version 2; then reads version 2 whole through the reader.
func (b *bench) moeS3(ctx context.Context, dir, kind string, srv *s3Server, srcs [2]string, hashes2 map[string]xxh3.Uint128) (moeS3, error) {
	var out moeS3
	prefix := "moe-" + kind
	url := "s3://" + syncBucket + "/" + prefix
	data := filepath.Join(b.work, "moe-s3", "data", syncBucket, prefix)
	defer b.discard(data)
	s3flags := []string{"--s3-endpoint", "http://" + srv.addr, "--s3-path-style"}
	if _, err := b.weightfsCmd(ctx, append(append([]string{"init"}, s3flags...), url)...); err != nil {
		return out, err
	}
	mntW, cacheW := filepath.Join(dir, "mnt-s3-writer"), filepath.Join(dir, "cache-s3-writer")
	mntR, cacheR := filepath.Join(dir, "mnt-s3-reader"), filepath.Join(dir, "cache-s3-reader")
	defer b.discard(cacheW)
	defer b.discard(cacheR)
	w, err := b.startDaemon(ctx, prefix+"-s3-writer", mntW, b.opts.Weightfs, append(append([]string{"mount"}, s3flags...), "--cache-dir", cacheW, url, mntW)...)
	if err != nil {
		return out, err
	}
	defer w.stop()
	// The reader mounts the empty store: mounted on version 1 it would fetch all of version
	// 1 before it mounts (over the daemon's start time at 20,000 tensors on a loaded machine).
	r, err := b.startDaemon(ctx, prefix+"-s3-reader", mntR, b.opts.Weightfs, append(append([]string{"mount", "--read-only"}, s3flags...), "--cache-dir", cacheR, url, mntR)...)
	if err != nil {
		return out, err
	}
	defer r.stop()
	b.logf("  moe: %s: version 1 through the S3 writer mount", kind)
	v1 := filepath.Join(mntW, gen.VersionDirName(1))
	if _, err := writeTree(srcs[0], v1, b.opts.WriteSize, false); err != nil {
		return out, err
	}
	if _, err := seal(v1); err != nil {
		return out, err
	}
	if err := waitLong(ctx, "the S3 reader serving version 1", func() bool { return latestIs(mntR, 1) }); err != nil {
		return out, err
	}
	cpu, err := readCPU(w.Pid())
	if err != nil {
		return out, err
	}
	if _, _, err := waitIdle(ctx, w.Pid(), cpu, time.Now()); err != nil {
		return out, err
	}
	objs, packs, err := objectsAndPacks(data)
	if err != nil {
		return out, err
	}
	if err := warmTree(srcs[1]); err != nil {
		return out, err
	}
	wBefore, err := s3.ReadStatsFile(cacheW)
	if err != nil {
		return out, err
	}
	b.logf("  moe: %s: version 2 through the S3 writer mount", kind)
	v2 := filepath.Join(mntW, gen.VersionDirName(2))
	if _, err := writeTree(srcs[1], v2, b.opts.WriteSize, false); err != nil {
		return out, err
	}
	rBefore, err := s3.ReadStatsFile(cacheR)
	if err != nil {
		return out, err
	}
	sealed, err := seal(v2)
	if err != nil {
		return out, err
	}
	// The writer rewrites its counters after the manifest's upload, before the seal returns.
	wAfter, err := s3.ReadStatsFile(cacheW)
	if err != nil {
		return out, err
	}
	if err := waitLong(ctx, "the S3 reader serving version 2", func() bool { return latestIs(mntR, 2) }); err != nil {
		return out, err
	}
	out.SealToShow = time.Since(sealed).Seconds()
	// The reader rewrites its counters at each poll of the change hint (250 ms).
	time.Sleep(600 * time.Millisecond)
	rShow, err := s3.ReadStatsFile(cacheR)
	if err != nil {
		return out, err
	}
	b.logf("  moe: %s: the S3 reader showed version 2 %.2f s after the seal; reading it whole", kind, out.SealToShow)
	if _, err := verifyFiles(filepath.Join(mntR, gen.VersionDirName(2)), hashes2); err != nil {
		return out, err
	}
	time.Sleep(600 * time.Millisecond)
	rRead, err := s3.ReadStatsFile(cacheR)
	if err != nil {
		return out, err
	}
	out.Writer, out.Show, out.Reader = s3Delta(wBefore, wAfter), s3Delta(rBefore, rShow), s3Delta(rBefore, rRead)
	o2, p2, err := objectsAndPacks(data)
	if err != nil {
		return out, err
	}
	out.Objects, out.Packs = o2-objs, p2-packs
	b.logf("  moe: %s: S3 writer %d requests (%d object uploads, %s); reader %d requests to catch up (+%d hint polls)",
		kind, out.Writer.Requests, out.Writer.ObjectUploads, humanBytes(out.Writer.ObjectUploadBytes), out.ReaderRequests(), out.Reader.HintRequests)
	if err := r.stop(); err != nil {
		return out, err
	}
	return out, w.stop()
}
