package fs

import (
	"errors"
	iofs "io/fs"
	"strings"
	"testing"

	"github.com/weightfs/weightfs/store"
)

func TestBuildIndex(t *testing.T) {
	file := func(p string, size int64) store.Entry { return store.Entry{Path: p, Size: size, Mode: 0o644} }
	dir := func(p string) store.Entry { return store.Entry{Path: p, Dir: true, Mode: iofs.ModeDir | 0o700} }
	tests := []struct {
		name     string
		entries  []store.Entry
		wantErr  bool
		children map[string][]string
	}{
		{"empty", nil, false, map[string][]string{"": nil}},
		{"flat", []store.Entry{file("b", 1), file("a", 2)}, false, map[string][]string{"": {"a", "b"}}},
		{"implicit parents", []store.Entry{file("x/y/z", 3)}, false,
			map[string][]string{"": {"x"}, "x": {"y"}, "x/y": {"z"}}},
		{"explicit dir after child", []store.Entry{file("d/f", 1), dir("d")}, false,
			map[string][]string{"": {"d"}, "d": {"f"}}},
		{"empty dir", []store.Entry{dir("e")}, false, map[string][]string{"": {"e"}, "e": nil}},
		{"duplicate file", []store.Entry{file("a", 1), file("a", 1)}, true, nil},
		{"file with children", []store.Entry{file("a", 1), file("a/b", 1)}, true, nil},
		{"absolute", []store.Entry{file("/a", 1)}, true, nil},
		{"dotdot", []store.Entry{file("a/../b", 1)}, true, nil},
		{"trailing slash", []store.Entry{file("a/", 1)}, true, nil},
		{"negative size", []store.Entry{file("a", -1)}, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx, err := buildIndex(store.VersionInfo{Number: 7}, tc.entries)
			if tc.wantErr {
				if !errors.Is(err, errBadManifest) {
					t.Fatalf("err = %v, want errBadManifest", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for d, want := range tc.children {
				got := idx.children[d]
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("children of %q = %v, want %v", d, got, want)
				}
			}
			if len(idx.children) != len(tc.children) {
				t.Errorf("%d directories, want %d", len(idx.children), len(tc.children))
			}
		})
	}
}

// FuzzBuildIndex feeds newline-separated path lists (a trailing / marks a directory): the index
// is built or refused with errBadManifest, never a panic, and every accepted file is found.
func FuzzBuildIndex(f *testing.F) {
	f.Add("a\nb/c\nb/")
	f.Add("x/y/z\nx\n")
	f.Add("/abs\n..\n.")
	f.Fuzz(func(t *testing.T, list string) {
		var entries []store.Entry
		for _, p := range strings.Split(list, "\n") {
			if d, ok := strings.CutSuffix(p, "/"); ok && d != "" {
				entries = append(entries, store.Entry{Path: d, Dir: true})
			} else {
				entries = append(entries, store.Entry{Path: p, Size: int64(len(p))})
			}
		}
		idx, err := buildIndex(store.VersionInfo{Number: 1}, entries)
		if err != nil {
			if !errors.Is(err, errBadManifest) {
				t.Fatalf("error %v does not wrap errBadManifest", err)
			}
			return
		}
		for _, e := range entries {
			if e.Dir && e.Path == "." {
				continue
			}
			parent, name := splitPath(e.Path)
			got, ok := idx.lookup(parent, name)
			if !ok || got.Dir != e.Dir {
				t.Fatalf("%q not found as listed", e.Path)
			}
		}
	})
}
