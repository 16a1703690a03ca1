package store

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPacksIndexFallback: a store whose pack index is damaged (a flipped byte, a cut) or
// missing opens (writer and reader) and reads every version byte for byte: the packs no
// intact index names are found from their own tables; the log names the damaged index and
// the pack read from its table.
func TestPacksIndexFallback(t *testing.T) {
	for _, attack := range []string{"flip", "truncate", "delete"} {
		t.Run(attack, func(t *testing.T) {
			s, root := newStore(t, Options{})
			want := map[uint64]map[string]string{}
			for i, files := range moeVersions(t, 3, 20) {
				v := uint64(i + 1)
				_, dir := commitTree(t, s, v, files)
				want[v] = treeHashes(t, dir)
			}
			if err := closeStore(t, s); err != nil {
				t.Fatal(err)
			}
			indexes := filesBelow(t, filepath.Join(root, indexDir))
			if len(indexes) != 3 {
				t.Fatalf("indexes %v, want 3", indexes)
			}
			// The first version's index: its pack holds the objects every version builds on.
			name := indexes[0]
			path := filepath.Join(root, indexDir, name)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			os.Chmod(path, 0o600)
			switch attack {
			case "flip":
				b[len(b)/2] ^= 0x40
				err = os.WriteFile(path, b, 0o400)
			case "truncate":
				err = os.WriteFile(path, b[:len(b)/3], 0o400)
			case "delete":
				err = os.Remove(path)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, ro := range []bool{false, true} {
				var log syncBuffer
				r := openStore(t, root, Options{ReadOnly: ro, Logger: slog.New(slog.NewTextHandler(&log, nil))})
				if attack != "delete" {
					expectDamage(r) // verify names the damaged index until a repair
				}
				for v, w := range want {
					sameTree(t, fmt.Sprintf("export of v%d (read-only %v)", v, ro), exportHashes(t, r, v), w)
				}
				out := log.String()
				if attack != "delete" && !strings.Contains(out, "index="+name) {
					t.Errorf("read-only %v: the log does not name the damaged index %s:\n%s", ro, name, out)
				}
				if !strings.Contains(out, "its objects are found from its own table") {
					t.Errorf("read-only %v: the log does not name the pack read from its table:\n%s", ro, out)
				}
				if err := closeStore(t, r); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestGCKeepsPacksOfALostIndex: a pack whose index was lost, an hour old, holds objects the
// versions need (read from its own table): gc's orphan sweep keeps it, and every version
// still reads.
func TestGCKeepsPacksOfALostIndex(t *testing.T) {
	s, root := newStore(t, Options{})
	want := map[uint64]map[string]string{}
	for i, files := range moeVersions(t, 2, 20) {
		v := uint64(i + 1)
		_, dir := commitTree(t, s, v, files)
		want[v] = treeHashes(t, dir)
	}
	if err := closeStore(t, s); err != nil {
		t.Fatal(err)
	}
	indexes := filesBelow(t, filepath.Join(root, indexDir))
	if err := os.Remove(filepath.Join(root, indexDir, indexes[0])); err != nil {
		t.Fatal(err)
	}
	aged := time.Now().Add(-2 * time.Hour)
	packs := filesBelow(t, filepath.Join(root, packDir))
	for _, p := range packs {
		if err := os.Chtimes(filepath.Join(root, packDir, p), aged, aged); err != nil {
			t.Fatal(err)
		}
	}
	s = openStore(t, root, Options{})
	if _, err := s.GC(5); err != nil {
		t.Fatal(err)
	}
	if got := filesBelow(t, filepath.Join(root, packDir)); len(got) != len(packs) {
		t.Fatalf("gc left packs %v of %v: it removed a pack of a lost index that holds live objects", got, packs)
	}
	for v, w := range want {
		sameTree(t, fmt.Sprintf("export of v%d after gc", v), exportHashes(t, s, v), w)
	}
}
