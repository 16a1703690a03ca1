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
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, all := g.daemons[r].out.String(), true
		for _, s := range says {
			all = all && strings.Contains(out, s)
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("rank %d never logged %q:\n%s", r, says, out)
		}
	}
}

// waitVersion waits until version v is listed at mnt, then checks its files' hashes.
func waitVersion(t *testing.T, mnt string, v int, want map[string]string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(versionDir(mnt, v)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed version %d", mnt, v)
		}
	}
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
