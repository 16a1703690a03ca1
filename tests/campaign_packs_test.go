package tests

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
	g := newCampaignGroup(t)
	for i, kt := range trials {
		g.run(kt.kind.name+"_"+kt.attack, func(t *testing.T) {
			// Trial numbers above the other campaigns' own.
			tr := newCampaignTrial(t, c, log, seed, 2000+i, kt.kind, kt.attack)
			tr.run()
		})
	}
	g.wait()
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
//
// A deleted pack index loses nothing: an index is a view of its packs' own tables, which the
// pack layer reads for the packs no intact index names (every version reads right). Verify
// may then pass, but it must note a pack the index named as named by no intact index (which
// verify --repair indexes again, and gc would take for a dead writer's orphan).
func (tr *campaignTrial) checkVerifyPacks(code int, out string) {
	if code == 0 && tr.kind.name == kindPackIndex.name && tr.attack == "delete" {
		for _, p := range tr.packTargets {
			for _, n := range tr.campaignPackNames(p)[1:] {
				if strings.Contains(out, "note: pack "+n+": no intact pack index names it") {
					tr.noted("verify passed, noting the packs of the deleted index")
					return
				}
			}
		}
	}
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

// campaignPackByHand writes every loose object of the store also into one pack
// (STORE/packs/<2 hex>/<64 hex>) named by one index record (STORE/index/NAME, sequence 1),
// with package pack alone: a store of packs as `weightfs verify` sees one, before the pack
// layer writes them (the loose objects stay and serve the reads). It returns the pack's path,
// the index's path and the pack's entries.
func campaignPackByHand(t *testing.T, storeDir string) (string, string, []pack.Entry) {
	t.Helper()
	if packs := kindPack.files(storeDir); len(packs) > 0 {
		return campaignFirstPack(t, storeDir, packs[0])
	}
	tmp, err := os.CreateTemp(t.TempDir(), "pack-")
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	w := pack.NewWriter(tmp)
	for _, p := range kindObject.files(storeDir) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var id pack.ID
		if n, err := hex.Decode(id[:], []byte(filepath.Base(p))); err != nil || n != len(id) {
			t.Fatalf("object %s: %v", p, err)
		}
		if err := w.Add(id, b); err != nil {
			t.Fatal(err)
		}
	}
	pid, size, ents, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%x", pid)
	packPath := filepath.Join(storeDir, "packs", name[:2], name)
	if err := os.MkdirAll(filepath.Dir(packPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := campaignCopyFile(tmp.Name(), packPath, 0o400); err != nil {
		t.Fatal(err)
	}
	x := pack.Index{Seq: 1, Packs: []pack.IndexedPack{{ID: pid, Size: size, Entries: ents}}}
	enc := x.Encode()
	indexPath := filepath.Join(storeDir, "index", pack.Name(1, enc))
	if err := os.MkdirAll(filepath.Dir(indexPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(indexPath, enc, 0o600); err != nil {
		t.Fatal(err)
	}
	return packPath, indexPath, ents
}

// campaignFirstPack is campaignPackByHand for a store whose commits wrote packs: the pack p,
// the index that names it, and its entries.
func campaignFirstPack(t *testing.T, storeDir, p string) (string, string, []pack.Entry) {
	t.Helper()
	for _, ip := range kindPackIndex.files(storeDir) {
		b, err := os.ReadFile(ip)
		if err != nil {
			t.Fatal(err)
		}
		x, err := pack.DecodeIndex(b)
		if err != nil {
			t.Fatalf("index %s: %v", ip, err)
		}
		for _, xp := range x.Packs {
			if fmt.Sprintf("%x", xp.ID) == filepath.Base(p) {
				return p, ip, xp.Entries
			}
		}
	}
	t.Fatalf("pack %s: no index names it", p)
	return "", "", nil
}

// TestVerifyNamesPacksCLI: `weightfs verify` on a store with a pack and its index (written by
// hand) names a damaged record with its object and pack, a damaged table with its pack and
// index, and a lost index's pack as named by no index; `verify --repair` writes the lost index
// again from the pack's table, and verify passes afterwards.
func TestVerifyNamesPacksCLI(t *testing.T) {
	storeDir, _ := smallStore(t, 20_000, 2)
	layer := len(kindPack.files(storeDir)) > 0 // the commits wrote packs: no loose copy serves
	packPath, indexPath, ents := campaignPackByHand(t, storeDir)
	packID := filepath.Base(packPath)
	r := mustCLI(t, "verify", storeDir)
	if !regexp.MustCompile(`objects, [0-9]+ packs \([0-9]+ records\) and [0-9]+ pack indexes: no damage`).MatchString(r.stdout) {
		t.Errorf("verify of an intact pack: %s", r.stdout)
	}
	pristine, err := os.ReadFile(packPath)
	if err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) {
		t.Helper()
		os.Chmod(packPath, 0o600)
		if err := os.WriteFile(packPath, b, 0o400); err != nil {
			t.Fatal(err)
		}
	}

	// A record: the object and its pack.
	b := slices.Clone(pristine)
	b[ents[0].Offset+ents[0].Length/2] ^= 0x10
	put(b)
	r = runCLI(t, "verify", storeDir)
	want := fmt.Sprintf("DAMAGED object %x in pack %s (pack index %s): ", ents[0].ID, packID, filepath.Base(indexPath))
	if r.code != 1 || !strings.Contains(r.stdout, want) {
		t.Errorf("a damaged record: exit %d, want 1 and a line %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}

	// Its table: the pack and its index; repair writes it again from the index.
	b = slices.Clone(pristine)
	b[len(b)-pack.FooterLen-3] ^= 0x10
	put(b)
	r = runCLI(t, "verify", storeDir)
	want = fmt.Sprintf("DAMAGED pack %s (pack index %s): table: ", packID, filepath.Base(indexPath))
	if r.code != 1 || !strings.Contains(r.stdout, want) {
		t.Errorf("a damaged table: exit %d, want 1 and a line %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	r = runCLI(t, "verify", "--repair", storeDir)
	if !strings.Contains(r.stdout, "MENDED pack "+packID) {
		t.Errorf("repair of a damaged table: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got, _ := os.ReadFile(packPath); !slices.Equal(got, pristine) {
		t.Errorf("the pack after its table was written again differs from its pristine bytes")
	}

	// A lost index: its pack is named by none (a note, and the repair indexes it again).
	if err := os.Remove(indexPath); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "verify", storeDir)
	// (Where the pack is the only copy of its objects, the versions that need them are
	// damaged too.)
	if (r.code != 0 && !layer) || !strings.Contains(r.stdout, "note: pack "+packID+": no intact pack index names it") {
		t.Errorf("a lost index: exit %d, want 0 and a note naming pack %s:\n%s%s", r.code, packID, r.stdout, r.stderr)
	}
	r = runCLI(t, "verify", "--repair", storeDir)
	if !strings.Contains(r.stdout, "REBUILT pack index ") {
		t.Errorf("repair of a lost index: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = mustCLI(t, "verify", storeDir)
	if strings.Contains(r.stdout, "note: pack") {
		t.Errorf("after the repair the pack is still named by no index:\n%s", r.stdout)
	}
}
