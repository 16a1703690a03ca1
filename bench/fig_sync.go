package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store/s3"
)

// Figure 9: end-to-end sync time. A trainer-side read-write mount on an S3 store (versitygw,
// the tests' server, listening on the trainer's side of fig_sync_net.go's link), a reader-side
// read-only mount in another network namespace, the link between them shaped to 1 Gbit/s.
// Version N-1 is written and synced (the reader serves it) over the link before it is shaped;
// then the clock starts at the first create of version N, and stops when the reader serves N:
// its `latest` turns to N only once its copy holds N and it has checked the SHA-256 of every
// changed file (docs/design.md, "A reader shows a version once its copy holds it"). Then every
// byte of N is read back through the reader mount and must hash as written; that read is
// reported but not counted, as the follower's directory is checked after its clock stops (a
// copy over the link, the baseline, would be loaded by the engine as well). Then `weightfs
// follow` of the reader mount copies N into a directory, and the clock runs again from the
// first create of N+1 until that directory holds N+1 (its files are checked afterwards): one
// round each, so that the read back and the follower do not compete for the CPU. The baseline
// is the whole checkpoint copied over the same shaped link by HTTP (this program's `fetch`, in
// the reader's namespace, from a file server on the trainer's side).
//
// The breakdown is what can be seen from outside: the write and the seal (this program's
// clock; the writer uploads while the version is written, and the seal waits for the rest),
// the reader's first manifest download of N and its last object download (its
// CACHE/s3-stats.json, sampled every syncSample), its `latest` turning to N, the last change
// to its materialized copy (the copy brought forward: the newest mtime under
// CACHE/materialized), and the read back.

const (
	syncSample       = 10 * time.Millisecond
	syncWait         = 5 * time.Minute // for any one step of the stage
	syncBucket       = "wfsbench"
	followInterval   = 250 * time.Millisecond
	versitygwVersion = "v1.8.0" // the Makefile's VERSITYGW and internal/s3test's Version
)

// s3ServerBinary finds the test S3 server: $WEIGHTFS_S3_SERVER, or where `make s3server` and
// the tests build it.
func s3ServerBinary() (string, error) {
	if p := os.Getenv("WEIGHTFS_S3_SERVER"); p != "" {
		return p, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(base, "weightfs-s3", "versitygw-"+versitygwVersion, "versitygw")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no test S3 server at %s (run `make s3server`, or set WEIGHTFS_S3_SERVER)", bin)
	}
	return bin, nil
}

// s3Server is one versitygw process.
type s3Server struct {
	addr, access, secret string
	stop                 func() error
}

// startS3Server starts versitygw on ip (a free port), its data under dir.
func (b *bench) startS3Server(ctx context.Context, bin, ip, dir string) (*s3Server, error) {
	for _, d := range []string{filepath.Join(dir, "data"), filepath.Join(dir, "iam"), filepath.Join(b.work, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		return nil, fmt.Errorf("find a port for the S3 server: %w", err)
	}
	s := &s3Server{addr: l.Addr().String(), access: "wfsbench", secret: fmt.Sprintf("wfsbench%d", time.Now().UnixNano())}
	l.Close()
	logf, err := os.Create(filepath.Join(b.work, "logs", "s3server.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", s.addr, "--iam-dir", filepath.Join(dir, "iam"), "--quiet", "posix", filepath.Join(dir, "data"))
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.access, "ROOT_SECRET_KEY="+s.secret)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start the S3 server %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	s.stop = b.clean.add("stop the S3 server at "+s.addr, func() error { return stopProcess(cmd, exited) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/")
		if err == nil {
			resp.Body.Close()
			return s, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("the S3 server exited at start (log %s)", logf.Name())
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("the S3 server does not answer on %s after 30 s", s.addr)
		}
	}
}

// setAWSEnv points this process's environment (which every weightfs it starts inherits) at
// the server, and returns the function that restores it.
func setAWSEnv(s *s3Server) func() {
	vars := map[string]string{
		"AWS_ACCESS_KEY_ID": s.access, "AWS_SECRET_ACCESS_KEY": s.secret, "AWS_SESSION_TOKEN": "",
		"AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL_S3": "",
	}
	old := map[string]*string{}
	for k, v := range vars {
		if prev, ok := os.LookupEnv(k); ok {
			old[k] = &prev
		} else {
			old[k] = nil
		}
		os.Setenv(k, v)
	}
	return func() {
		for k, v := range old {
			if v == nil {
				os.Unsetenv(k)
			} else {
				os.Setenv(k, *v)
			}
		}
	}
}

// syncEvents are the moments figure 9's watcher saw, zero until seen.
type syncEvents struct {
	Manifest   time.Time // the reader's manifest downloads went up
	LastObject time.Time // the reader's object downloads last went up (before Latest)
	Latest     time.Time // the reader's latest named version N
	Follower   time.Time // the follower's directory state said version N
	Applying   time.Time // the follower's state said it was applying N (its patch was open)
	Objects    int64     // object bytes the reader downloaded
	Manifests  int64     // manifest bytes
}

// watchSync samples the reader's counters, its latest link and the follower's state until
// stop is closed, and returns what it saw.
func watchSync(readerCache, readerMnt, followDir string, v int, before s3.Stats, stop <-chan struct{}) <-chan syncEvents {
	out := make(chan syncEvents, 1)
	want := gen.VersionDirName(v)
	go func() {
		var ev syncEvents
		last := before
		t := time.NewTicker(syncSample)
		defer t.Stop()
		for {
			now := time.Now()
			if st, err := s3.ReadStatsFile(readerCache); err == nil {
				if ev.Manifest.IsZero() && st.ManifestDownloads > before.ManifestDownloads {
					ev.Manifest = now
				}
				if ev.Latest.IsZero() && (st.ObjectDownloads != last.ObjectDownloads || st.ObjectBytes != last.ObjectBytes) {
					ev.LastObject = now
				}
				ev.Objects, ev.Manifests = st.ObjectBytes-before.ObjectBytes, st.ManifestBytes-before.ManifestBytes
				last = st
			}
			if ev.Latest.IsZero() {
				if target, err := os.Readlink(filepath.Join(readerMnt, "latest")); err == nil && filepath.Base(target) == want {
					ev.Latest = now
				}
			}
			if ev.Follower.IsZero() && followDir != "" {
				if st, ok, err := delta.ReadDirState(followDir); err == nil && ok {
					if ev.Applying.IsZero() && st.Pending == uint64(v) {
						ev.Applying = now
					}
					if st.Version == uint64(v) && st.Pending == 0 {
						ev.Follower = now
						if ev.Applying.IsZero() {
							ev.Applying = now // applied between two samples
						}
					}
				}
			}
			select {
			case <-stop:
				out <- ev
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// waitFor polls cond every syncSample until it holds, ctx ends or syncWait passes.
func waitFor(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(syncWait)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v", what, syncWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(syncSample):
		}
	}
	return nil
}

// latestIs reports whether mnt's latest names version v.
func latestIs(mnt string, v int) bool {
	target, err := os.Readlink(filepath.Join(mnt, "latest"))
	return err == nil && filepath.Base(target) == gen.VersionDirName(v)
}

// followerHolds reports whether dir's state says version v, complete.
func followerHolds(dir string, v int) bool {
	st, ok, err := delta.ReadDirState(dir)
	return err == nil && ok && st.Version == uint64(v) && st.Pending == 0
}

// verifyFiles reads each file of want under dir and checks its xxh3-128; it returns the bytes
// read.
func verifyFiles(dir string, want map[string]xxh3.Uint128) (int64, error) {
	buf := make([]byte, 4<<20)
	var total int64
	h := xxh3.New()
	for rel, sum := range want {
		h.Reset()
		n, err := readOneFile(filepath.Join(dir, filepath.FromSlash(rel)), buf, h)
		total += n
		if err != nil {
			return total, err
		}
		if h.Sum128() != sum {
			return total, fmt.Errorf("%s: %s: the bytes read differ from the bytes written", dir, rel)
		}
	}
	return total, nil
}

// newestMtime is the newest modification time of a regular file under dir.
func newestMtime(dir string) time.Time {
	var newest time.Time
	filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && info.ModTime().After(newest) {
			newest = info.ModTime()
		}
		return nil
	})
	return newest
}

// startFollower runs `weightfs follow` of mnt into dir until the cleaner or stop ends it.
func (b *bench) startFollower(mnt, dir string) (func() error, error) {
	if err := os.MkdirAll(filepath.Join(b.work, "logs"), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(b.work, "logs", "sync-follower.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(b.opts.Weightfs, "follow", "--interval", followInterval.String(), mnt, dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start weightfs follow: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	return b.clean.add("stop the follower of "+mnt, func() error { return stopProcess(cmd, exited) }), nil
}

// baselineCopy serves src over HTTP on ip and copies every file of it into dst from the
// reader's namespace, through the shaped link; it returns the copy's seconds and bytes.
func (b *bench) baselineCopy(ctx context.Context, l *netLink, src, dst string) (float64, int64, error) {
	ln, err := net.Listen("tcp", l.hostIP+":0")
	if err != nil {
		return 0, 0, err
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(src))}
	go srv.Serve(ln)
	defer srv.Close()
	files, err := treeFiles(src)
	if err != nil {
		return 0, 0, err
	}
	args := []string{b.self, "fetch", dst}
	for _, f := range files {
		if strings.Contains(f, "/") {
			return 0, 0, fmt.Errorf("baseline: %s is in a subdirectory", f)
		}
		args = append(args, "http://"+ln.Addr().String()+"/"+f)
	}
	name, argv := l.inNS(args...)
	cmd := exec.CommandContext(ctx, name, argv...)
	began := time.Now()
	out, err := cmd.Output()
	secs := time.Since(began).Seconds()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return 0, 0, fmt.Errorf("baseline copy: %v: %s", err, ee.Stderr)
		}
		return 0, 0, fmt.Errorf("baseline copy: %w", err)
	}
	var n int64
	fmt.Sscan(string(out), &n)
	return secs, n, nil
}

// stopProcess ends cmd, whose Wait closes exited: SIGTERM, then SIGKILL after 10 s. A process
// that exited already is left alone.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}) error {
	select {
	case <-exited:
		return nil
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
	return nil
}
