package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/internal/s3test"
)

// rankGroup is W `weightfs mount --group g` daemons of one store (rank 0 also publishes)
// and their sharded checkpoints (gen, W shards): rank K-1 owns shard K, rank 0 the rest.
type rankGroup struct {
	t       *testing.T
	dir     string
	store   string
	ranks   int
	mnts    []string
	daemons []*mountDaemon
	want    map[int]map[string]string // version -> file -> sha256
	env     []string                  // extra environment of each rank's daemon (by rank)
}

func newRankGroup(t *testing.T, storeURL string, ranks int) *rankGroup {
	g := &rankGroup{t: t, dir: t.TempDir(), store: storeURL, ranks: ranks, env: make([]string, ranks)}
	for r := range ranks {
		g.mnts = append(g.mnts, filepath.Join(g.dir, fmt.Sprintf("rank%d", r)))
		os.Mkdir(g.mnts[r], 0o755)
		g.daemons = append(g.daemons, nil)
	}
	return g
}

// start starts (or restarts) rank r's daemon.
func (g *rankGroup) start(r int) {
	flags := []string{"--group", "g", "--rank", fmt.Sprint(r), "--ranks", fmt.Sprint(g.ranks),
		"--cache-dir", filepath.Join(g.dir, fmt.Sprintf("cache%d", r)), "--group-wait", "60s"}
	if r == 0 {
		flags = append(flags, "--publish", "--publish-poll", "20ms")
	}
	if g.env[r] != "" {
		k, val, _ := strings.Cut(g.env[r], "=")
		os.Setenv(k, val)
		defer os.Unsetenv(k)
	}
	if isMounted(g.mnts[r]) {
		_ = syscall.Unmount(g.mnts[r], syscall.MNT_DETACH) // a killed daemon's stale mount
	}
	g.daemons[r] = startMount(g.t, g.store, g.mnts[r], flags...)
}

// gen writes n successive checkpoints of a model of params parameters in g.ranks shards.
func (g *rankGroup) gen(params int64, n int) {
	cfg := gen.ConfigForParams(params, 3e-6, 19)
	cfg.Shards = g.ranks
	m, err := gen.New(cfg)
	if err != nil {
		g.t.Fatal(err)
	}
	g.want = map[int]map[string]string{}
	for v := 1; v <= n; v++ {
		if v > 1 {
			m.Step()
		}
		if err := m.WriteCheckpoint(srcDir(g.dir, v)); err != nil {
			g.t.Fatal(err)
		}
		g.want[v] = treeHashes(g.t, srcDir(g.dir, v))
	}
}

// owner is the rank that owns file name of a checkpoint.
func (g *rankGroup) owner(name string) int {
	var k, n int
	if _, err := fmt.Sscanf(name, "model-%05d-of-%05d.safetensors", &k, &n); err == nil && n == g.ranks {
		return k - 1
	}
	return 0
}

// write copies rank r's files of checkpoint src into MNT/weight_vNNNNNN/ with cp(1), and
// the files of extra too (a file another rank owns).
func (g *rankGroup) write(r, v, src int, extra ...string) {
	g.t.Helper()
	vdir := versionDir(g.mnts[r], v)
	if err := os.Mkdir(vdir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		g.t.Fatal(err)
	}
	entries, err := os.ReadDir(srcDir(g.dir, src))
	if err != nil {
		g.t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if g.owner(e.Name()) == r || contains(extra, e.Name()) {
			files = append(files, filepath.Join(srcDir(g.dir, src), e.Name()))
		}
	}
	if out, err := exec.Command("cp", append(files, vdir+"/")...).CombinedOutput(); err != nil {
		g.t.Fatalf("rank %d: cp into version %d: %v\n%s", r, v, err, out)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// seal closes DONE in version v of each rank of ranks, at once, and returns each close's
// error (nil: the version is published).
func (g *rankGroup) seal(v int, ranks ...int) []error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = closeDone(g.mnts[r], v)
		}()
	}
	wg.Wait()
	return errs
}

func closeDone(mnt string, v int) error {
	f, err := os.Create(filepath.Join(versionDir(mnt, v), "DONE"))
	if err == nil {
		err = f.Close()
	}
	return err
}

// waitLog waits until rank r's daemon has logged every one of says.
func (g *rankGroup) waitLog(r int, says ...string) {
	g.t.Helper()
	var out string
	waitFor(g.t, fmt.Sprintf("rank %d to log %q", r, says), func() bool {
		out = g.daemons[r].out.String()
		for _, s := range says {
			if !strings.Contains(out, s) {
				return false
			}
		}
		return true
	}, func() string { return out })
}

// waitVersion waits until version v is listed at mnt, then checks its files' hashes.
func waitVersion(t *testing.T, mnt string, v int, want map[string]string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s to show version %d", mnt, v), func() bool {
		_, err := os.Stat(versionDir(mnt, v))
		return err == nil
	}, nil)
	if got := sha256sumTree(t, versionDir(mnt, v)); !reflect.DeepEqual(got, want) {
		t.Fatalf("version %d read through %s: %v, want %v", v, mnt, got, want)
	}
}

// TestGroupS3FourRanks: 4 rank daemons (rank 0 also the publisher) of an S3 store on the
// test server write 10 versions of a generated 4-shard model, each rank its own shard with
// cp(1) and DONE; every rank's close returns once the version is published, and two
// read-only daemons read every version bit-identically (sha256sum) as it appears. Then the
// same 10 checkpoints committed by one writer into another prefix give the same objects,
// byte for byte, and the same manifests but for their creation times; no group record is
// left.
func TestGroupS3FourRanks(t *testing.T) {
	// It compares the object files of the group and of one writer (store format 2's layout:
	// in format 3 each writes packs of its own, which hold the same records).
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1")
	skipWithoutFUSE(t)
	srv := s3test.Start(t)
	srv.SetEnv(t)
	const bucket, versions = "weightfs-group", 10
	groupURL, singleURL := "s3://"+bucket+"/group", "s3://"+bucket+"/single"
	mustCLI(t, "init", groupURL)
	mustCLI(t, "init", singleURL)
	g := newRankGroup(t, groupURL, 4)
	g.gen(2_000_000, versions)
	for r := range g.ranks {
		g.start(r)
	}
	var readers []string
	for i := range 2 {
		mnt := filepath.Join(g.dir, fmt.Sprintf("reader%d", i))
		os.Mkdir(mnt, 0o755)
		startMount(t, groupURL, mnt, "--read-only", "--poll", "50ms", "--cache-dir", mnt+"-cache")
		readers = append(readers, mnt)
	}
	all := []int{0, 1, 2, 3}
	for v := 1; v <= versions; v++ {
		for r := range g.ranks {
			g.write(r, v, v)
		}
		for r, err := range g.seal(v, all...) {
			if err != nil {
				t.Fatalf("rank %d: DONE of version %d: %v\n%s", r, v, err, g.daemons[r].out.String())
			}
		}
		for _, mnt := range readers {
			waitVersion(t, mnt, v, g.want[v])
		}
	}
	for v := 1; v <= versions; v++ {
		mustCLI(t, "commit", "--cache-dir", filepath.Join(g.dir, "single-cache"), singleURL, srcDir(g.dir, v))
	}
	groupObjs := treeHashes(t, filepath.Join(srv.ObjectDir(bucket, "group"), "objects"))
	singleObjs := treeHashes(t, filepath.Join(srv.ObjectDir(bucket, "single"), "objects"))
	if len(groupObjs) == 0 || !reflect.DeepEqual(groupObjs, singleObjs) {
		t.Fatalf("the group stored %d objects, one writer %d: not the same", len(groupObjs), len(singleObjs))
	}
	for v := 1; v <= versions; v++ {
		name := fmt.Sprintf("versions/v%06d", v)
		gm := manifestWithoutClock(t, filepath.Join(srv.ObjectDir(bucket, "group"), name))
		sm := manifestWithoutClock(t, filepath.Join(srv.ObjectDir(bucket, "single"), name))
		if !bytes.Equal(gm, sm) {
			t.Fatalf("version %d: the group's manifest differs from one writer's:\n%s\n%s", v, gm, sm)
		}
	}
	if left, _ := os.ReadDir(filepath.Join(srv.ObjectDir(bucket, "group"), "groups", "g")); len(left) != 0 {
		t.Fatalf("group records left: %v", left)
	}
	t.Logf("%d objects and %d manifests, as one writer stores them", len(groupObjs), versions)
}

// manifestWithoutClock is a manifest's JSON (docs/format.md Part I §4) without "created".
func manifestWithoutClock(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b[16:len(b)-4], &m); err != nil {
		t.Fatalf("manifest %s: %v", p, err)
	}
	delete(m, "created")
	out, _ := json.Marshal(m)
	return out
}

// localRankGroup is a rankGroup of W ranks on a new local store, every daemon started, with
// n checkpoints generated, and a read-only daemon.
func localRankGroup(t *testing.T, ranks, n int, env ...string) (*rankGroup, string) {
	skipWithoutFUSE(t)
	storeDir := filepath.Join(t.TempDir(), "store")
	initStore(t, storeDir)
	g := newRankGroup(t, storeDir, ranks)
	copy(g.env, env)
	g.gen(300_000, n)
	for r := range ranks {
		g.start(r)
	}
	reader := filepath.Join(g.dir, "reader")
	os.Mkdir(reader, 0o755)
	startMount(t, storeDir, reader, "--read-only", "--poll", "50ms")
	return g, reader
}

// storeVersions lists the versions sealed in a local store (its manifests' names).
func storeVersions(t *testing.T, storeDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(storeDir, "versions"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestGroupMountRefusals: a version the publisher refuses fails every rank's DONE close
// with ECANCELED, and the logs name the ranks and the reason: two ranks that wrote one file,
// and ranks that sealed different version numbers. A refusal record is left, the version
// never appears, a second close fails at once, and the group goes on with a higher number.
func TestGroupMountRefusals(t *testing.T) {
	g, reader := localRankGroup(t, 2, 2)
	shard2 := "model-00002-of-00002.safetensors"

	// Version 1: rank 0 also writes rank 1's shard.
	g.write(0, 1, 1, shard2)
	g.write(1, 1, 1)
	for r, err := range g.seal(1, 0, 1) {
		if !errors.Is(err, syscall.ECANCELED) {
			t.Fatalf("rank %d: DONE of version 1 with a file of two ranks: %v, want ECANCELED", r, err)
		}
	}
	why := "file " + shard2 + " is written by rank 0 and by rank 1"
	g.waitLog(0, why, "version refused")
	g.waitLog(1, why)
	if _, err := os.Stat(filepath.Join(g.store, "groups", "g", "v000001", "refused")); err != nil {
		t.Fatalf("no refusal record: %v", err)
	}
	if err := closeDone(g.mnts[1], 1); !errors.Is(err, syscall.ECANCELED) {
		t.Fatalf("DONE of refused version 1 again: %v, want ECANCELED", err)
	}
	for _, mnt := range g.mnts {
		if err := os.RemoveAll(versionDir(mnt, 1)); err != nil {
			t.Fatal(err)
		}
	}

	// Rank 0 writes version 2, rank 1 version 3.
	g.write(0, 2, 1)
	g.write(1, 3, 1)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, v := range []int{2, 3} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = closeDone(g.mnts[r], v) }()
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, syscall.ECANCELED) {
			t.Fatalf("rank %d: DONE of a version the other rank did not write: %v, want ECANCELED", r, err)
		}
	}
	g.waitLog(0, "sealed no part of it (rank ")
	os.RemoveAll(versionDir(g.mnts[0], 2))
	os.RemoveAll(versionDir(g.mnts[1], 3))
	if vs := storeVersions(t, g.store); len(vs) != 0 {
		t.Fatalf("refused versions appeared: %v", vs)
	}

	// Then both write version 4 (checkpoint 2): it is published.
	for r := range g.ranks {
		g.write(r, 4, 2)
	}
	for r, err := range g.seal(4, 0, 1) {
		if err != nil {
			t.Fatalf("rank %d: DONE of version 4: %v", r, err)
		}
	}
	waitVersion(t, reader, 4, g.want[2])
	if vs := storeVersions(t, g.store); !reflect.DeepEqual(vs, []string{"v000004"}) {
		t.Fatalf("versions %v, want only v000004", vs)
	}
	// The publisher removes the records of a version after its manifest is written: a
	// reader may see version 4 before they are gone.
	pastRecords := func() []string {
		left, _ := os.ReadDir(filepath.Join(g.store, "groups", "g"))
		var names []string
		for _, e := range left {
			if strings.HasPrefix(e.Name(), "v") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	waitFor(t, "the records of past versions to be removed", func() bool { return len(pastRecords()) == 0 },
		func() string { return fmt.Sprintf("records of past versions left: %v", pastRecords()) })
	verifyStore(t, g.store)
}

// TestGroupMountRankKilled: a rank killed (SIGKILL) mid-version keeps the version from
// appearing while the other rank's part waits; restarted, it writes its files again, and
// the version is published: both closes return and a reader reads it bit-identically.
func TestGroupMountRankKilled(t *testing.T) {
	g, reader := localRankGroup(t, 2, 2)
	for r := range g.ranks {
		g.write(r, 1, 1)
	}
	for r, err := range g.seal(1, 0, 1) {
		if err != nil {
			t.Fatalf("rank %d: DONE of version 1: %v", r, err)
		}
	}
	waitVersion(t, reader, 1, g.want[1])

	g.write(1, 2, 2)
	g.daemons[1].kill9()
	g.write(0, 2, 2)
	done := make(chan error, 1)
	go func() { done <- closeDone(g.mnts[0], 2) }()
	g.waitPart(0, 2)
	if vs := storeVersions(t, g.store); !reflect.DeepEqual(vs, []string{"v000001"}) {
		t.Fatalf("with rank 1 dead: versions %v", vs)
	}
	select {
	case err := <-done:
		t.Fatalf("rank 0's DONE returned with rank 1 dead: %v", err)
	default:
	}
	g.start(1)
	g.write(1, 2, 2)
	if err := closeDone(g.mnts[1], 2); err != nil {
		t.Fatalf("restarted rank 1: DONE of version 2: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("rank 0: DONE of version 2: %v", err)
	}
	waitVersion(t, reader, 2, g.want[2])
	verifyStore(t, g.store)
}

// TestGroupMountPublisherKilled: the publisher (rank 0's daemon) killed by
// WEIGHTFS_FAILPOINT during its seal of version 1, before the manifest is written and
// after: the version is absent or whole, never part; restarted, the publisher publishes
// it (when absent), rank 1's close returns, and the group goes on to version 2.
func TestGroupMountPublisherKilled(t *testing.T) {
	for _, c := range []struct {
		point   string
		present bool
	}{{"seal-objects-synced", false}, {"seal-manifest-written", true}} {
		t.Run(c.point, func(t *testing.T) {
			g, reader := localRankGroup(t, 2, 2, "WEIGHTFS_FAILPOINT="+c.point)
			for r := range g.ranks {
				g.write(r, 1, 1)
			}
			done := []chan error{make(chan error, 1), make(chan error, 1)}
			for r := range g.ranks {
				go func() { done[r] <- closeDone(g.mnts[r], 1) }()
			}
			select {
			case <-g.daemons[0].exited:
			case <-time.After(hangLimit):
				t.Fatal("the publisher did not die at its failpoint")
			}
			g.daemons[0].killed = true
			g.waitLog(0, "killed at failpoint")
			want := []string(nil)
			if c.present {
				want = []string{"v000001"}
			}
			if vs := storeVersions(t, g.store); !reflect.DeepEqual(vs, want) {
				t.Fatalf("after the publisher died at %s: versions %v, want %v", c.point, vs, want)
			}
			if c.present {
				verifyStore(t, g.store)
				waitVersion(t, reader, 1, g.want[1])
			}
			g.env[0] = ""
			g.start(0)
			// Rank 0's close died with its daemon; rank 1's returns once version 1 is there.
			<-done[0]
			if err := <-done[1]; err != nil {
				t.Fatalf("rank 1: DONE of version 1: %v", err)
			}
			waitVersion(t, reader, 1, g.want[1])
			for r := range g.ranks {
				g.write(r, 2, 2)
			}
			for r, err := range g.seal(2, 0, 1) {
				if err != nil {
					t.Fatalf("rank %d: DONE of version 2: %v", r, err)
				}
			}
			waitVersion(t, reader, 2, g.want[2])
			verifyStore(t, g.store)
		})
	}
}

// TestGroupMountStatusAbort: `weightfs group status` beside a running group says which rank
// sealed and which did not begin; `weightfs group abort` of a version whose rank is gone
// fails the waiting rank's DONE close with ECANCELED; the group then goes on with a higher
// number once the rank is back.
func TestGroupMountStatusAbort(t *testing.T) {
	g, reader := localRankGroup(t, 2, 2)
	g.daemons[1].stop() // rank 1 is gone
	g.write(0, 1, 1)
	done := make(chan error, 1)
	go func() { done <- closeDone(g.mnts[0], 1) }()
	g.waitPart(0, 1)
	st := mustCLI(t, "group", "status", g.store, "g")
	if want := "version 1 (2 ranks): sealed by rank 0; not begun by rank 1"; !strings.Contains(st.stdout, want) {
		t.Fatalf("group status: %q, want %q", st.stdout, want)
	}
	ab := mustCLI(t, "group", "abort", "--why", "node 1 is gone", g.store, "g", "1")
	if !strings.Contains(ab.stdout, "version 1 of group g aborted") {
		t.Fatalf("group abort: %q", ab.stdout)
	}
	if err := <-done; !errors.Is(err, syscall.ECANCELED) {
		t.Fatalf("rank 0: DONE of an aborted version: %v, want ECANCELED", err)
	}
	g.waitLog(0, "rank 1 had sealed no part (node 1 is gone)")
	st = mustCLI(t, "group", "status", g.store, "g")
	if want := "REFUSED (aborted)"; !strings.Contains(st.stdout, want) || !strings.Contains(st.stdout, "naming rank 1") {
		t.Fatalf("group status after abort: %q", st.stdout)
	}
	if res := runCLI(t, "group", "abort", g.store, "g", "x"); res.code != 2 {
		t.Fatalf("group abort with a bad version: exit %d, %s", res.code, res.stderr)
	}
	os.RemoveAll(versionDir(g.mnts[0], 1))
	g.start(1)
	for r := range g.ranks {
		g.write(r, 2, 2)
	}
	for r, err := range g.seal(2, 0, 1) {
		if err != nil {
			t.Fatalf("rank %d: DONE of version 2: %v", r, err)
		}
	}
	waitVersion(t, reader, 2, g.want[2])
	if st := mustCLI(t, "group", "status", g.store, "g"); !strings.Contains(st.stdout, "no records") {
		t.Fatalf("group status at the end: %q", st.stdout)
	}
}

// TestGroupMountWaitBound: a rank whose publisher is not there fails its DONE close with
// ETIMEDOUT after --group-wait, its log saying which ranks sealed; its part stays sealed, so
// once the publisher comes the version is published with it, and closing DONE again
// returns (the files compared with the part, not written again). A file changed after the
// first close is refused at the second.
func TestGroupMountWaitBound(t *testing.T) {
	g, reader := localRankGroup(t, 2, 2)
	g.daemons[0].stop() // no publisher
	g.daemons[1].stop()
	g.daemons[1] = startMount(t, g.store, g.mnts[1], "--group", "g", "--rank", "1", "--ranks", "2",
		"--cache-dir", filepath.Join(g.dir, "cache1"), "--group-wait", "300ms")
	g.write(1, 1, 1)
	if err := closeDone(g.mnts[1], 1); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("DONE without a publisher: %v, want ETIMEDOUT", err)
	}
	g.waitLog(1, "version 1 not published yet (rank 1 sealed, rank 0 not begun)")
	g.start(0)
	g.write(0, 1, 1)
	if err := closeDone(g.mnts[0], 1); err != nil {
		t.Fatalf("rank 0: DONE of version 1: %v", err)
	}
	if err := closeDone(g.mnts[1], 1); err != nil {
		t.Fatalf("rank 1: DONE of version 1 again, once published: %v", err)
	}
	waitVersion(t, reader, 1, g.want[1])
	waitVersion(t, g.mnts[1], 1, g.want[1])

	// Version 2: rank 1 times out again (rank 0 has not begun), then changes its shard.
	g.write(1, 2, 2)
	if err := closeDone(g.mnts[1], 2); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("DONE of version 2 before rank 0: %v, want ETIMEDOUT", err)
	}
	g.write(1, 2, 1) // version 1's shard over version 2's
	if err := closeDone(g.mnts[1], 2); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("DONE of version 2 with a shard changed after its part was sealed: %v, want EINVAL", err)
	}
	g.waitLog(1, "changed since this rank sealed its part")
}

// waitPart waits until rank r has sealed its part of version v (its part record exists).
func (g *rankGroup) waitPart(r, v int) {
	g.t.Helper()
	part := filepath.Join(g.store, "groups", "g", fmt.Sprintf("v%06d", v), fmt.Sprintf("rank-%d.part", r))
	waitFor(g.t, fmt.Sprintf("rank %d to seal its part of version %d", r, v), func() bool {
		_, err := os.Stat(part)
		return err == nil
	}, nil)
}

// waitFor polls cond until it holds, failing the test after 30 s with what it waited for
// (and detail(), when given: what it saw last).
func waitFor(t testing.TB, what string, cond func() bool, detail func() string) {
	t.Helper()
	for deadline := time.Now().Add(hangLimit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			if detail != nil {
				t.Fatalf("waited 30s for %s:\n%s", what, detail())
			}
			t.Fatalf("waited 30s for %s", what)
		}
	}
}

// TestGroupMountWrongGroup: a rank started with a mistyped --group ("h" for "g") writes its
// shard of version 1 while the group g writes version 1; when g publishes version 1, the
// mistyped rank's DONE close fails with ECANCELED (its shard is in no version), and its log
// names its group, the group that published and what to do; g's ranks' closes return and the
// version holds g's files.
func TestGroupMountWrongGroup(t *testing.T) {
	g, reader := localRankGroup(t, 2, 2)
	wrong := filepath.Join(g.dir, "wrong")
	os.Mkdir(wrong, 0o755)
	d := startMount(t, g.store, wrong, "--group", "h", "--rank", "1", "--ranks", "2",
		"--cache-dir", filepath.Join(g.dir, "cache-wrong"), "--group-wait", "60s")
	shard2 := "model-00002-of-00002.safetensors"

	g.write(0, 1, 1)
	g.write(1, 1, 1)
	closed := make(chan error, 2)
	go func() { closed <- closeDone(g.mnts[0], 1) }()
	g.waitPart(0, 1)
	// The mistyped rank writes its own save (checkpoint 2's shard) as version 1.
	if err := os.Mkdir(versionDir(wrong, 1), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", filepath.Join(srcDir(g.dir, 2), shard2), versionDir(wrong, 1)+"/").CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	wrongClosed := make(chan error, 1)
	go func() { wrongClosed <- closeDone(wrong, 1) }()
	part := filepath.Join(g.store, "groups", "h", "v000001", "rank-1.part")
	waitFor(t, "the mistyped rank to seal its part", func() bool {
		_, err := os.Stat(part)
		return err == nil
	}, nil)
	go func() { closed <- closeDone(g.mnts[1], 1) }()
	for range 2 {
		if err := <-closed; err != nil {
			t.Fatalf("a rank of g: DONE of version 1: %v", err)
		}
	}
	if err := <-wrongClosed; !errors.Is(err, syscall.ECANCELED) {
		t.Fatalf("the mistyped rank's DONE of version 1: %v, want ECANCELED", err)
	}
	var out string
	waitFor(t, "the mistyped rank to log why", func() bool {
		out = d.out.String()
		return strings.Contains(out, "published without this rank's part")
	}, func() string { return out })
	for _, s := range []string{"rank 1 of 2 of group h", "file " + shard2 + " has other bytes there", "published by group g",
		"not by group h", "in no version", "--group (this rank's: h)"} {
		if !strings.Contains(out, s) {
			t.Fatalf("the mistyped rank's log does not say %q:\n%s", s, out)
		}
	}
	waitVersion(t, reader, 1, g.want[1])
}
