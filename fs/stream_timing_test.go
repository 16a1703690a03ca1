package fs

import (
	"bufio"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

// TestIngestTiming is a measuring tool, not a test: with WEIGHTFS_TIMING=PARAMS (e.g. 5e8 for
// a ~1 GB bf16 checkpoint) it writes generated checkpoints through a pass-through go-fuse
// loopback mount and through a weightfs mount, and logs write throughput, seal latency and
// the peak RssAnon of this process (which serves the mount). It asserts nothing about time.
// WEIGHTFS_TIMING_DIR names a scratch directory (default: the test's temp directory).
func TestIngestTiming(t *testing.T) {
	spec := os.Getenv("WEIGHTFS_TIMING")
	if spec == "" {
		t.Skip("set WEIGHTFS_TIMING=PARAMS to measure ingest through the mount")
	}
	params, err := strconv.ParseFloat(spec, 64)
	if err != nil {
		t.Fatalf("WEIGHTFS_TIMING=%q: %v", spec, err)
	}
	canMount(t)
	scratch := os.Getenv("WEIGHTFS_TIMING_DIR")
	if scratch == "" {
		scratch = t.TempDir()
	}
	versions := 3
	if v, err := strconv.Atoi(os.Getenv("WEIGHTFS_TIMING_VERSIONS")); err == nil && v > 0 {
		versions = v
	}
	cfg := gen.ConfigForParams(int64(params), 3e-6, 7)
	src := filepath.Join(scratch, "src")
	for v := 1; v <= versions; v++ {
		dir := filepath.Join(src, fmt.Sprint(v))
		if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
			continue
		}
		start := time.Now()
		if err := gen.StreamCheckpoint(cfg, v-1, dir); err != nil {
			t.Fatal(err)
		}
		t.Logf("generated version %d in %v", v, time.Since(start).Round(time.Millisecond))
	}
	total := dirBytes(t, filepath.Join(src, "1"))
	t.Logf("checkpoint: %.2f GB, %d versions", float64(total)/1e9, versions)

	// The loopback reference: the same files copied through a pass-through mount.
	loopDir := filepath.Join(scratch, "loop")
	os.RemoveAll(loopDir)
	os.MkdirAll(loopDir, 0o755)
	loopMnt := filepath.Join(scratch, "loopmnt")
	os.MkdirAll(loopMnt, 0o755)
	root, err := gofs.NewLoopbackRoot(loopDir)
	if err != nil {
		t.Fatal(err)
	}
	// The options of bench/loopback.go: weightfs's request sizes and one-second timeouts.
	ttl := time.Second
	srv, err := gofs.Mount(loopMnt, root, &gofs.Options{EntryTimeout: &ttl, AttrTimeout: &ttl,
		MountOptions: fuse.MountOptions{MaxWrite: maxWrite, MaxReadAhead: maxWrite, MaxBackground: 64, DisableXAttrs: true}})
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 2; v++ {
		dst := filepath.Join(loopMnt, fmt.Sprint(v))
		os.Mkdir(dst, 0o755)
		d := copyTree(t, filepath.Join(src, fmt.Sprint(v)), dst)
		syncStart := time.Now()
		syscall.Sync()
		t.Logf("loopback v%d: write %.0f MB/s (%v), sync %v", v, float64(total)/1e6/d.Seconds(), d.Round(time.Millisecond), time.Since(syncStart).Round(time.Millisecond))
		os.RemoveAll(filepath.Join(loopDir, fmt.Sprint(v-1)))
	}
	srv.Unmount()
	os.RemoveAll(loopDir)

	storeDir := filepath.Join(scratch, "store")
	os.RemoveAll(storeDir)
	if err := store.Init(storeDir); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(storeDir, store.Options{Logger: logtest.New(t.Logf)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		st.Close()
		os.RemoveAll(storeDir)
	}()
	mnt := filepath.Join(scratch, "mnt")
	os.MkdirAll(mnt, 0o755)
	wsrv, err := Mount(st, mnt, Options{Logger: logtest.New(t.Logf)})
	if err != nil {
		t.Fatal(err)
	}
	defer wsrv.Unmount()
	peak := watchRssAnon()
	for v := 1; v <= versions; v++ {
		ver := filepath.Join(mnt, fmt.Sprintf("weight_v%06d", v))
		if err := os.Mkdir(ver, 0o755); err != nil {
			t.Fatal(err)
		}
		peak.reset()
		d := copyTree(t, filepath.Join(src, fmt.Sprint(v)), ver)
		sealStart := time.Now()
		if err := seal(ver); err != nil {
			t.Fatal(err)
		}
		sd := time.Since(sealStart)
		info, _ := st.Version(uint64(v))
		t.Logf("weightfs v%d: write %.0f MB/s (%v), seal %v (%.1f%% of the write), stored %.1f MB, peak RssAnon %d MB",
			v, float64(total)/1e6/d.Seconds(), d.Round(time.Millisecond), sd.Round(time.Millisecond),
			100*sd.Seconds()/d.Seconds(), float64(info.StoredBytes)/1e6, peak.get()>>20)
	}
	peak.stop()
}

func dirBytes(t *testing.T, dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n
}

// copyTree copies the files of src into dst in 4 MiB writes, as a trainer writes, and returns
// the time the copy took (closes included).
func copyTree(t *testing.T, src, dst string) time.Duration {
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	start := time.Now()
	for _, e := range entries {
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyBuffer(struct{ io.Writer }{out}, struct{ io.Reader }{in}, buf); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return time.Since(start)
}

// rssWatcher samples RssAnon of this process every 20 ms and keeps the peak.
type rssWatcher struct {
	peak atomic.Int64
	quit chan struct{}
	wg   sync.WaitGroup
}

func watchRssAnon() *rssWatcher {
	w := &rssWatcher{quit: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if n := rssAnon(); n > w.peak.Load() {
				w.peak.Store(n)
			}
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *rssWatcher) reset()     { w.peak.Store(0) }
func (w *rssWatcher) get() int64 { return w.peak.Load() }
func (w *rssWatcher) stop()      { close(w.quit); w.wg.Wait() }

func rssAnon() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
