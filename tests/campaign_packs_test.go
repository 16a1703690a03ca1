package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store/pack"
)

// The campaign of packs (store format 3, docs/format.md Part I §8): the campaign's trials
// (the same pristine store, the same checks: verify names the damage, reads return the right
// bytes or EIO, never ENOENT, no daemon dies, repair moves no version that read exactly) on
// the files a store of packs adds: the packs (a flipped byte, a cut, a deletion, two packs'
// files swapped) and the pack indexes (the same). Verify must name the damaged pack (its id)
// or pack index (its name, or for a deleted one a pack it named: those are then named by no
// index); repair must leave a store that verifies, or say what stays damaged (a damaged
// record is left in its pack until gc rewrites it).
//
// It needs a store whose commits write packs: on a store without packs/ after its commits
// (before the pack layer) it skips.
//
//	WEIGHTFS_CAMPAIGN_SEED=S go test ./tests -run 'TestCampaignPacks/pack_flip' -v
func TestCampaignPacks(t *testing.T) {
	skipWithoutFUSE(t)
	seed := campaignEnv(t, "WEIGHTFS_CAMPAIGN_SEED", campaignDefaultSeed)
	weightfsBin(t)
	c := sharedCampaignStore(t)
	if len(kindPack.files(c.storeDir())) == 0 {
		t.Skip("the campaign's store has no packs/ after its commits (objects are written loose, store format 2): " +
			"the pack layer (store format 3) is not in this build; these trials run once it is")
	}
	trials := campaignPackTrials
	if testing.Short() {
		trials = campaignPackTrialsShort
	}
	log := &campaignLog{}
	for i, kt := range trials {
		t.Run(kt.kind.name+"_"+kt.attack, func(t *testing.T) {
			// Trial numbers above the other campaigns' own.
			tr := newCampaignTrial(t, c, log, seed, 2000+i, kt.kind, kt.attack)
			tr.run()
		})
	}
	log.summarize(t, seed)
}

type campaignPackTrial struct {
	kind   campaignKind
	attack string
}

var (
	kindPack = campaignKind{"pack", false, func(root string) []string {
		return campaignRegularFiles(filepath.Join(root, "packs"), func(rel string) bool { return campaignIsHexID(filepath.Base(rel)) })
	}}
	kindPackIndex = campaignKind{"packindex", false, func(root string) []string {
		return campaignRegularFiles(filepath.Join(root, "index"), func(rel string) bool {
			_, ok := pack.ParseName(rel)
			return ok
		})
	}}
	// Every kind with every attack; under -short one trial per attack, the kinds taking turns.
	campaignPackTrials = []campaignPackTrial{
		{kindPack, "flip"}, {kindPack, "truncate"}, {kindPack, "delete"}, {kindPack, "swap"},
		{kindPackIndex, "flip"}, {kindPackIndex, "truncate"}, {kindPackIndex, "delete"}, {kindPackIndex, "swap"},
	}
	campaignPackTrialsShort = []campaignPackTrial{
		{kindPack, "flip"}, {kindPackIndex, "truncate"}, {kindPack, "delete"}, {kindPackIndex, "swap"},
	}
)

// campaignIsPackKind says whether the trial damages a pack or a pack index.
func (tr *campaignTrial) campaignIsPackKind() bool {
	return tr.kind.name == kindPack.name || tr.kind.name == kindPackIndex.name
}

// campaignPackNames are the names verify may give the damage of the pack file or index record
// p (its pristine bytes in the campaign's store): a pack's id (its file's name); an index's
// name, and the ids of the packs it names (a deleted index leaves them named by none).
func (tr *campaignTrial) campaignPackNames(p string) []string {
	names := []string{filepath.Base(p)}
	if tr.kind.name != kindPackIndex.name {
		return names
	}
	rel, _ := filepath.Rel(tr.storeDir, p)
	b, err := os.ReadFile(filepath.Join(tr.c.storeDir(), rel))
	if err != nil {
		tr.t.Fatalf("the pristine index %s: %v", rel, err)
	}
	x, err := pack.DecodeIndex(b)
	if err != nil {
		tr.t.Fatalf("the pristine index %s: %v", rel, err)
	}
	for _, ip := range x.Packs {
		names = append(names, fmt.Sprintf("%x", ip.ID))
	}
	return names
}

// checkVerifyPacks is checkVerify for a damaged pack or pack index: verify fails and names one
// of the damaged files (a swap damages two) by the names campaignPackNames gives.
func (tr *campaignTrial) checkVerifyPacks(code int, out string) {
	if code == 0 {
		tr.fail("verify", "missed damage", "exit 0:\n\t\t%s", campaignTail(out, 1000))
		return
	}
	for _, p := range tr.packTargets {
		for _, n := range tr.campaignPackNames(p) {
			if strings.Contains(out, n) {
				return
			}
		}
	}
	tr.fail("verify", "damage not named", "exit %d without naming the damaged %s (%s) or a pack it names:\n\t\t%s",
		code, tr.kind.name, strings.Join(tr.packTargets, ", "), campaignTail(out, 2000))
}

// checkRepairPacks: after `verify --repair` of damaged packs, verify passes, or the repair said
// what stays damaged (a record left in its pack, a pack cut short that its index names), and
// verify still names it.
func (tr *campaignTrial) checkRepairPacks(repairOut string) {
	v := tr.runCLI("verify", tr.storeDir)
	if v.code == 0 {
		return
	}
	if !strings.Contains(repairOut, "stay") {
		tr.fail("repair", "not consistent after repair", "verify after verify --repair: exit %d, and the repair did not say what stays damaged:\n\t\t%s\n\trepair said:\n\t\t%s",
			v.code, campaignTail(v.stdout+v.stderr, 1500), campaignTail(repairOut, 1500))
		return
	}
	tr.noted("repair left damage it named")
}

// campaignPackedHeaders returns, for every record of every pack of a store, the object's id
// and the first bytes of its file (its header), read with the packs' own tables: what
// campaignObjectUses reads of loose objects.
func campaignPackedHeaders(t *testing.T, storeDir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, p := range kindPack.files(storeDir) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			t.Fatal(err)
		}
		ents, _, err := pack.ReadTrailer(f, st.Size())
		if err != nil {
			f.Close()
			t.Fatalf("pack %s: %v", p, err)
		}
		for _, e := range ents {
			head := make([]byte, min(e.Length, 96))
			if _, err := f.ReadAt(head, e.Offset); err != nil {
				f.Close()
				t.Fatalf("pack %s: record of %x: %v", p, e.ID, err)
			}
			out[fmt.Sprintf("%x", e.ID)] = head
		}
		f.Close()
	}
	return out
}
