package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The crash-and-damage campaign (docs/format.md §7, §8): every trial copies a pristine store and its caches,
// damages one file of one kind (a flipped byte, a truncation or a deletion), then runs
// `weightfs verify`, `weightfs export` of every version, and reads every file of every version
// and of patches/ and deltas/ through a read-only mount (with a persistent, pre-filled cache
// directory) and then a read-write mount, which also seals the next version and reads it back.
// It fails on any wrong byte, any dead or hung daemon or command, any crashed command, and any
// damage of the store that verify does not name; and, where the damage cannot explain them,
// on errors: a damaged cache must never cost a read, a damaged manifest never a read of
// another version, no mount may refuse to start and no seal may fail except on a damaged
// format file, and a missing object is EIO, never ENOENT.
//
// Trials run kinds x attacks in turn, campaignConcurrency at a time (trial i: kind i mod 6,
// attack i/6 mod 3); which file
// and which byte or length come from a generator seeded by the campaign seed and the trial
// number, so a trial is reproduced by its seed and name:
//
//	WEIGHTFS_CAMPAIGN_SEED=S go test ./tests -run 'TestCampaign/trial07_' -v
//
// WEIGHTFS_CAMPAIGN_TRIALS=N runs N trials (default campaignDefaultTrials, 18 under -short:
// each kind and attack once).
const (
	campaignDefaultTrials = 72
	campaignDefaultSeed   = 1
)

// campaignAttacks are applied to one file each; see campaignDamage.
var campaignAttacks = []string{"flip", "truncate", "delete"}

func TestCampaign(t *testing.T) {
	// Parallel with TestCommitTwentyVersions, the other long test of the package: one is mostly
	// processes and I/O, the other CPU (make test's wall time; issue 28 item 5).
	t.Parallel()
	skipWithoutFUSE(t)
	seed := campaignEnv(t, "WEIGHTFS_CAMPAIGN_SEED", campaignDefaultSeed)
	trials := campaignDefaultTrials
	if testing.Short() {
		trials = len(campaignKinds) * len(campaignAttacks)
	}
	trials = int(campaignEnv(t, "WEIGHTFS_CAMPAIGN_TRIALS", uint64(trials)))
	t.Logf("campaign seed %d, %d trials (WEIGHTFS_CAMPAIGN_SEED, WEIGHTFS_CAMPAIGN_TRIALS)", seed, trials)
	weightfsBin(t)
	c := sharedCampaignStore(t)
	log := &campaignLog{}
	g := newCampaignGroup(t)
	for i := 0; i < trials; i++ {
		kind := campaignKinds[i%len(campaignKinds)]
		attack := campaignAttacks[(i/len(campaignKinds))%len(campaignAttacks)]
		g.run(fmt.Sprintf("trial%02d_%s_%s", i, kind.name, attack), func(t *testing.T) {
			tr := newCampaignTrial(t, c, log, seed, i, kind, attack)
			tr.run()
		})
	}
	g.wait()
	log.summarize(t, seed)
}

// campaignConcurrency is how many trials run at once (WEIGHTFS_CAMPAIGN_CONCURRENCY; 1: one
// after another). A trial spends most of its time waiting for its commands and mounts (a
// fraction of a core), and trials share nothing but the pristine store they copy and the
// log, so running a few at once cuts make test's wall time and changes nothing a trial does
// or checks (which file and which byte it damages come from the seed and its number alone).
const campaignConcurrency = 3

// campaignGroup runs subtests campaignConcurrency at a time: t.Run from goroutines, not
// t.Parallel, so that go test's -parallel (2 on 2 cores, one of them held by
// TestCommitTwentyVersions) does not hold them back.
type campaignGroup struct {
	t   *testing.T
	sem chan struct{}
	wg  sync.WaitGroup
}

func newCampaignGroup(t *testing.T) *campaignGroup {
	n := int(campaignEnv(t, "WEIGHTFS_CAMPAIGN_CONCURRENCY", campaignConcurrency))
	return &campaignGroup{t: t, sem: make(chan struct{}, max(n, 1))}
}

// run starts the subtest name once fewer than campaignConcurrency run, and returns.
func (g *campaignGroup) run(name string, f func(t *testing.T)) {
	g.sem <- struct{}{}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer func() { <-g.sem }()
		g.t.Run(name, f)
	}()
}

// wait returns when every subtest run started has ended (before the test's function returns,
// as t.Run from goroutines requires).
func (g *campaignGroup) wait() { g.wg.Wait() }

// campaignEnv reads a number from the environment (def when unset).
func campaignEnv(t *testing.T, name string, def uint64) uint64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// campaignTrial is one damaged copy of the pristine store and what is checked on it.
type campaignTrial struct {
	t      *testing.T
	c      *campaignStore
	log    *campaignLog
	seed   uint64
	n      int
	kind   campaignKind
	attack string
	rng    *rand.Rand

	work     string
	storeDir string
	roCache  string
	damage   []string // one line per damaged file
	object   string   // the damaged object's id (kind object)
	manifest int      // the damaged manifest's version (kind manifest)
	outcome  []string // what each phase saw, for the trial's log line
	deadRead string   // the current mount's first read that found the daemon gone
	// exactBefore: the versions whose export was exact before any repair (checkRepair).
	exactBefore map[int]bool

	// packTargets are the damaged files of a pack kind, and the other of a swap
	// (campaign_packs_test.go).
	packTargets []string
}

func newCampaignTrial(t *testing.T, c *campaignStore, log *campaignLog, seed uint64, n int, kind campaignKind, attack string) *campaignTrial {
	work := t.TempDir()
	tr := &campaignTrial{t: t, c: c, log: log, seed: seed, n: n, kind: kind, attack: attack, exactBefore: map[int]bool{},
		rng:  rand.New(rand.NewPCG(seed, uint64(n))),
		work: work, storeDir: filepath.Join(work, "store"), roCache: filepath.Join(work, "rocache")}
	if err := campaignCopyTree(c.storeDir(), tr.storeDir); err != nil {
		t.Fatalf("copy the pristine store: %v", err)
	}
	if err := campaignCopyTree(c.roCacheDir(), tr.roCache); err != nil {
		t.Fatalf("copy the pristine reader cache: %v", err)
	}
	return tr
}

func (tr *campaignTrial) run() {
	tr.applyDamage()
	tr.t.Logf("seed %d trial %d: %s", tr.seed, tr.n, strings.Join(tr.damage, "; "))
	tr.checkVerify()
	tr.checkExports()
	tr.checkMount("ro", "--read-only", "--cache-dir", tr.roCache)
	tr.checkMount("rw")
	tr.checkRepair()
	tr.t.Logf("outcome: %s", strings.Join(tr.outcome, "; "))
}

// applyDamage picks the file(s) and damages them: for a store kind one file of the store;
// for a cache kind one file of the writer's cache (STORE/cache) and one of the reader's.
func (tr *campaignTrial) applyDamage() {
	roots := []string{tr.storeDir}
	if tr.kind.cache {
		roots = []string{filepath.Join(tr.storeDir, "cache"), tr.roCache}
	}
	for _, root := range roots {
		files := tr.kind.files(root)
		if len(files) == 0 && tr.kind.name == "object" && len(kindPack.files(root)) > 0 {
			tr.t.Skip("no loose object to damage: the store keeps its objects in packs (TestCampaignPacks damages them)")
		}
		if len(files) == 0 {
			tr.t.Fatalf("%s: %v under %s", tr.kind.name, errNoTarget, root)
		}
		p := files[tr.rng.IntN(len(files))]
		var what string
		var err error
		if campaignIsMoreAttack(tr.attack) {
			var others []string
			what, others, err = campaignDamageMore(tr.rng, p, files, tr.campaignOtherIndex(root), tr.attack)
			if tr.campaignIsPackKind() {
				tr.packTargets = append(tr.packTargets, others...)
			}
		} else {
			what, err = campaignDamage(tr.rng, p, tr.attack)
		}
		if err != nil {
			tr.t.Fatalf("damage %s: %v", p, err)
		}
		if tr.campaignIsPackKind() {
			tr.packTargets = append([]string{p}, tr.packTargets...)
		}
		rel, _ := filepath.Rel(tr.work, p)
		desc := fmt.Sprintf("%s %s: %s", tr.kind.name, rel, what)
		switch tr.kind.name {
		case "object":
			tr.object = filepath.Base(p)
			u := tr.c.objects[tr.object]
			desc += fmt.Sprintf(" [%s object, named by %s]", u.rep, campaignDescribeUses(u.versions))
		case "manifest":
			v, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "v"))
			if err != nil {
				tr.t.Fatal(err)
			}
			tr.manifest = v
		}
		tr.damage = append(tr.damage, desc)
	}
}

func campaignDescribeUses(vs map[int]string) string {
	if len(vs) == 0 {
		return "no manifest (a base only)"
	}
	var parts []string
	for v, f := range vs {
		parts = append(parts, fmt.Sprintf("v%d %s", v, f))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// campaignDamage applies attack to the file p and says what it did. A flip XORs one random byte
// with a random non-zero value; a truncation cuts the file at a random shorter length.
func campaignDamage(rng *rand.Rand, p, attack string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	size := st.Size()
	if attack != "delete" && size == 0 {
		attack = "delete" // nothing to flip or cut in an empty file
	}
	if err := os.Chmod(p, st.Mode().Perm()|0o600); err != nil {
		return "", err
	}
	defer os.Chmod(p, st.Mode().Perm())
	switch attack {
	case "flip":
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return "", err
		}
		defer f.Close()
		off := rng.Int64N(size)
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			return "", err
		}
		x := byte(1 + rng.IntN(255))
		if _, err := f.WriteAt([]byte{b[0] ^ x}, off); err != nil {
			return "", err
		}
		return fmt.Sprintf("flipped byte %d of %d (%#02x -> %#02x)", off, size, b[0], b[0]^x), f.Close()
	case "truncate":
		n := rng.Int64N(size)
		return fmt.Sprintf("truncated to %d of %d bytes", n, size), os.Truncate(p, n)
	case "delete":
		return fmt.Sprintf("deleted (%d bytes)", size), os.Remove(p)
	}
	return "", fmt.Errorf("unknown attack %q", attack)
}

// fail records one finding and fails the trial with a message that says how to reproduce it.
func (tr *campaignTrial) fail(phase, class, format string, args ...any) {
	tr.t.Helper()
	detail := fmt.Sprintf(format, args...)
	tr.log.add(campaignFinding{trial: tr.n, kind: tr.kind.name, attack: tr.attack, phase: phase, class: class})
	tr.t.Errorf("CAMPAIGN FAILURE seed %d trial %d (%s %s) [%s] %s: %s\n\tdamage: %s\n\trerun: WEIGHTFS_CAMPAIGN_SEED=%d go test ./tests -run 'TestCampaign/%s' -v",
		tr.seed, tr.n, tr.kind.name, tr.attack, phase, class, detail, strings.Join(tr.damage, "; "), tr.seed, strings.SplitN(tr.t.Name(), "/", 2)[1])
}

// noted adds a line to the trial's outcome.
func (tr *campaignTrial) noted(format string, args ...any) {
	tr.outcome = append(tr.outcome, fmt.Sprintf(format, args...))
}

// versionIntact says whether version v's manifest was left alone.
func (tr *campaignTrial) versionIntact(v int) bool {
	return tr.kind.name != "manifest" || v != tr.manifest
}

// latestManifestDeleted is the one damage no check can see: a store whose newest manifest is
// gone is a store whose newest seal never happened (docs/format.md §7).
func (tr *campaignTrial) latestManifestDeleted() bool {
	return tr.kind.name == "manifest" && tr.attack == "delete" && tr.manifest == campaignVersions
}

// campaignNamesVersion matches output naming version v ("version 3", "weight_v000003", "v000003").
func campaignNamesVersion(out string, v int) bool {
	re := regexp.MustCompile(fmt.Sprintf(`(?i)(version\s+0*%d\b|v0*%d\b)`, v, v))
	return re.MatchString(out)
}

// campaignFinding is one failure, by what it was; the summary groups them.
type campaignFinding struct {
	trial                      int
	kind, attack, phase, class string
}

type campaignLog struct {
	mu       sync.Mutex
	findings []campaignFinding
}

func (l *campaignLog) add(f campaignFinding) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.findings = append(l.findings, f)
}

// summarize logs every distinct failure (kind, attack, phase, class) with the trials that
// showed it.
func (l *campaignLog) summarize(t *testing.T, seed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.findings) == 0 {
		t.Logf("campaign seed %d: no failures", seed)
		return
	}
	groups := map[string][]int{}
	for _, f := range l.findings {
		k := fmt.Sprintf("%-8s %-8s %-7s %s", f.kind, f.attack, f.phase, f.class)
		if ts := groups[k]; len(ts) == 0 || ts[len(ts)-1] != f.trial {
			groups[k] = append(ts, f.trial)
		}
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "campaign seed %d: %d failures, %d distinct (kind attack phase class: trials):\n", seed, len(l.findings), len(keys))
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %v\n", k, groups[k])
	}
	t.Log(b.String())
}
