package tests

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestCampaignAttacks runs the campaign's trials (the same pristine store, the same checks) with
// the attacks a careful attacker adds to flipped bytes, truncations and deletions: another
// valid file of the same kind in a file's place (two objects or two files of a cache swapped,
// an older version's manifest over a newer one, the other cache's index), a file of zero
// length, an empty directory or a FIFO where a file should be, a file where a cache keeps a
// directory, and a format file that is valid but of a format version this program does not
// know. Each kind and attack runs once; which file comes from the campaign seed as in
// TestCampaign:
//
//	WEIGHTFS_CAMPAIGN_SEED=S go test ./tests -run 'TestCampaignAttacks/manifest_older' -v
func TestCampaignAttacks(t *testing.T) {
	skipWithoutFUSE(t)
	seed := campaignEnv(t, "WEIGHTFS_CAMPAIGN_SEED", campaignDefaultSeed)
	weightfsBin(t)
	c := sharedCampaignStore(t)
	log := &campaignLog{}
	g := newCampaignGroup(t)
	n := 0
	for _, kind := range append(campaignKinds[:len(campaignKinds):len(campaignKinds)], kindCacheDir) {
		for _, attack := range campaignMoreAttacks[kind.name] {
			trial := 1000 + n // Trial numbers above the campaign's own: another file than its trials pick.
			g.run(kind.name+"_"+attack, func(t *testing.T) {
				tr := newCampaignTrial(t, c, log, seed, trial, kind, attack)
				tr.run()
			})
			n++
		}
	}
	g.wait()
	log.summarize(t, seed)
}

// campaignMoreAttacks are TestCampaignAttacks' attacks per kind (see campaignDamageMore). A
// manifest replaced by a directory is not listed: the store reads it as deleted, which
// TestCampaign's delete trials cover.
var campaignMoreAttacks = map[string][]string{
	"object":   {"swap", "replace", "empty", "dir", "fifo"},
	"manifest": {"older", "newer", "empty"},
	"index":    {"swap", "empty", "dir", "fifo"},
	"copy":     {"swap", "empty", "dir", "fifo"},
	"format":   {"future", "empty", "dir", "fifo"},
	"render":   {"swap", "empty", "dir", "fifo"},
	"cachedir": {"file"},
}

// kindCacheDir is a directory of a cache (the materialized copy's, the render cache's), for
// the attack file: TestCampaignAttacks' only, TestCampaign's kinds are left as they are.
var kindCacheDir = campaignKind{"cachedir", true, func(root string) []string {
	var out []string
	for _, d := range []string{"materialized", "render"} {
		if st, err := os.Stat(filepath.Join(root, d)); err == nil && st.IsDir() {
			out = append(out, filepath.Join(root, d))
		}
	}
	return out
}}

// campaignIsMoreAttack says whether attack is one of campaignDamageMore's.
func campaignIsMoreAttack(attack string) bool {
	for _, as := range campaignMoreAttacks {
		for _, a := range as {
			if a == attack {
				return true
			}
		}
	}
	return false
}

// campaignDamageMore applies one of TestCampaignAttacks' attacks to the file p, one of files
// (the files of its kind under its root), and says what it did:
//   - swap: p and another file of files exchange their bytes (one of the same size when
//     there is one); an index is replaced by the other cache's pristine index (other)
//   - replace: p gets the bytes of another file of files (the other is left alone)
//   - older, newer: a manifest gets the bytes of the version's before (after) it
//   - empty: p is cut to zero length
//   - dir: p is replaced by an empty directory
//   - fifo: p is replaced by a FIFO (whose open for reading blocks until a writer comes)
//   - file: the directory p is replaced by a file
//   - future: the format file of format version 4 (none this program knows), with a right CRC
func campaignDamageMore(rng *rand.Rand, p string, files []string, other, attack string) (string, []string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", nil, err
	}
	size := st.Size()
	writeBytes := func(q string, data []byte) error {
		qs, err := os.Stat(q)
		if err != nil {
			return err
		}
		if err := os.Chmod(q, qs.Mode().Perm()|0o600); err != nil {
			return err
		}
		if err := os.WriteFile(q, data, 0); err != nil {
			return err
		}
		return os.Chmod(q, qs.Mode().Perm())
	}
	pick := func(sameSize bool) string {
		var cands []string
		for _, f := range files {
			if f == p {
				continue
			}
			if fs, err := os.Stat(f); err == nil && (!sameSize || fs.Size() == size) {
				cands = append(cands, f)
			}
		}
		if len(cands) == 0 {
			return ""
		}
		return cands[rng.IntN(len(cands))]
	}
	switch attack {
	case "swap":
		q := other
		if q == "" {
			if q = pick(true); q == "" {
				q = pick(false)
			}
		}
		if q == "" {
			return "", nil, fmt.Errorf("swap %s: %w", p, errNoTarget)
		}
		a, err := os.ReadFile(p)
		if err != nil {
			return "", nil, err
		}
		b, err := os.ReadFile(q)
		if err != nil {
			return "", nil, err
		}
		if err := writeBytes(p, b); err != nil {
			return "", nil, err
		}
		if other != "" {
			return fmt.Sprintf("replaced (%d bytes) by %s (%d bytes)", size, other, len(b)), nil, nil
		}
		if err := writeBytes(q, a); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("swapped (%d bytes) with %s (%d bytes)", size, filepath.Base(q), len(b)), []string{q}, nil
	case "replace", "older", "newer":
		q := ""
		switch attack {
		case "replace":
			q = pick(false)
		default:
			v, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "v"))
			if err != nil {
				return "", nil, err
			}
			if attack == "older" && v > 1 {
				v--
			} else {
				v++ // older of v1 is newer, newer of the latest older
				if _, err := os.Stat(filepath.Join(filepath.Dir(p), fmt.Sprintf("v%06d", v))); err != nil {
					v -= 2
				}
			}
			q = filepath.Join(filepath.Dir(p), fmt.Sprintf("v%06d", v))
		}
		if q == "" {
			return "", nil, fmt.Errorf("%s %s: %w", attack, p, errNoTarget)
		}
		b, err := os.ReadFile(q)
		if err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("replaced (%d bytes) by a copy of %s (%d bytes)", size, filepath.Base(q), len(b)), nil, writeBytes(p, b)
	case "empty":
		return fmt.Sprintf("cut to 0 of %d bytes", size), nil, writeBytes(p, nil)
	case "file":
		if err := os.RemoveAll(p); err != nil {
			return "", nil, err
		}
		return "directory replaced by a file", nil, os.WriteFile(p, []byte("not a directory\n"), 0o600)
	case "fifo":
		if err := os.Remove(p); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("replaced (%d bytes) by a FIFO", size), nil, syscall.Mkfifo(p, 0o600)
	case "dir":
		if err := os.Remove(p); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("replaced (%d bytes) by an empty directory", size), nil, os.Mkdir(p, 0o700)
	case "future":
		ver := uint32(4)
		b := make([]byte, 16)
		copy(b, "WFSSTORE")
		binary.LittleEndian.PutUint32(b[8:], ver)
		binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(b[:12], crc32.MakeTable(crc32.Castagnoli)))
		return fmt.Sprintf("replaced by a format file of format version %d", ver), nil, writeBytes(p, b)
	}
	return "", nil, fmt.Errorf("unknown attack %q", attack)
}

// campaignOtherIndex is, for the index attack swap, the pristine index of the other cache than
// the one under root.
func (tr *campaignTrial) campaignOtherIndex(root string) string {
	if tr.kind.name != "index" || tr.attack != "swap" {
		return ""
	}
	if root == tr.roCache {
		return filepath.Join(tr.c.storeDir(), "cache", "index.db")
	}
	return filepath.Join(tr.c.roCacheDir(), "index.db")
}
