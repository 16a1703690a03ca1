package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// checkRepair runs `weightfs verify --repair --dry-run`, then `weightfs verify --repair`, on
// the damaged store (after the mounts: the writer's cache holds the copy the rw mount left)
// and holds them to the rule "repair never moves a version that every read path serves
// exactly" (issue 27): every version whose export was exact before the repair is still
// listed, is not moved into quarantine, and exports exactly after it; the dry run moves
// nothing and names everything the repair then moves (the repair may move less); and verify passes afterwards wherever a
// quarantine can mend the damage (not a damaged format file).
func (tr *campaignTrial) checkRepair() {
	versionsDir := filepath.Join(tr.storeDir, "versions")
	before, _ := os.ReadDir(versionsDir)
	dry := tr.runCLI("verify", "--repair", "--dry-run", tr.storeDir)
	dout := dry.stdout + dry.stderr
	if dry.hung || campaignCrashed(dry.code, dout) {
		tr.fail("repair", "crash", "verify --repair --dry-run: exit %d (hung %v):\n\t\t%s", dry.code, dry.hung, campaignCrashExcerpt(dout))
		return
	}
	if after, _ := os.ReadDir(versionsDir); len(after) != len(before) {
		tr.fail("repair", "dry run changed the store", "%d manifests before, %d after:\n\t\t%s", len(before), len(after), campaignTail(dout, 1500))
	}
	r := tr.runCLI("verify", "--repair", tr.storeDir)
	out := r.stdout + r.stderr
	tr.noted("repair exit %d", r.code)
	if r.hung || campaignCrashed(r.code, out) {
		tr.fail("repair", "crash", "verify --repair: exit %d (hung %v):\n\t\t%s", r.code, r.hung, campaignCrashExcerpt(out))
		return
	}
	moved := linesWith(r.stdout, "QUARANTINED ")
	wouldMove := linesWith(dry.stdout, "WOULD BE QUARANTINED ")
	// The dry run plans from one Verify; the repair verifies again after writing objects
	// again, which may rescue a version (rebuilt back through a re-anchored object): it
	// moves nothing the dry run did not name.
	named := map[string]bool{}
	for _, l := range wouldMove {
		named[strings.TrimPrefix(l, "WOULD BE ")] = true
	}
	for _, l := range moved {
		if !named[l] {
			tr.fail("repair", "dry run differs", "the dry run said it would move %q, the repair moved %q", wouldMove, moved)
			break
		}
	}
	for v := 1; v <= campaignVersions; v++ {
		if !tr.exactBefore[v] {
			continue
		}
		for _, l := range moved {
			if campaignNamesVersion(strings.TrimPrefix(l, "QUARANTINED "), v) && strings.Contains(l, "quarantine/v") {
				tr.fail("repair", "intact version moved", "v%d exported exactly before the repair, which moved it: %s", v, l)
			}
		}
		exp := filepath.Join(tr.work, fmt.Sprintf("export-after-repair-v%d", v))
		e := tr.runCLI("export", tr.storeDir, fmt.Sprint(v), exp)
		if e.code != 0 {
			tr.fail("repair", "intact version lost", "v%d exported exactly before the repair, not after: exit %d:\n\t\t%s", v, e.code, campaignTail(e.stdout+e.stderr, 1500))
			continue
		}
		got := treeHashes(tr.t, exp)
		for f, w := range tr.c.want[v] {
			if got[f] != w {
				tr.fail("repair", "wrong bytes", "v%d %s after the repair: SHA-256 %s, want %s", v, f, got[f], w)
			}
		}
		os.RemoveAll(exp)
	}
	if tr.campaignIsPackKind() {
		tr.checkRepairPacks(out)
	}
	if tr.kind.name == "object" || tr.kind.name == "manifest" {
		if v := tr.runCLI("verify", tr.storeDir); v.code != 0 {
			tr.fail("repair", "not consistent after repair", "verify after verify --repair: exit %d:\n\t\t%s\n\trepair said:\n\t\t%s", v.code, campaignTail(v.stdout+v.stderr, 1500), campaignTail(out, 1500))
		}
	}
}

// linesWith are the lines of out that start with prefix.
func linesWith(out, prefix string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			ls = append(ls, l)
		}
	}
	return ls
}
