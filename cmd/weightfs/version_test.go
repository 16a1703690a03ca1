package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribeBuild(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		bi   *debug.BuildInfo
		want string
	}{
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.9.0"},
			Settings: vcs("vcs", "git", "vcs.revision", "8316072e84bd547f21eb8cc7c101102e18e144e0", "vcs.time", "2026-11-24T08:52:07Z", "vcs.modified", "false")},
			"weightfs v0.9.0, revision 8316072e84bd547f21eb8cc7c101102e18e144e0 (2026-11-24T08:52:07Z), go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: vcs("vcs.revision", "abc", "vcs.modified", "true")},
			"weightfs (devel), revision abc, modified, go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"weightfs (devel), no VCS revision stamped (built outside a git checkout, or with -buildvcs=false), go1.26.8"},
		{nil, "weightfs: no build information in this binary"},
	} {
		if got := describeBuild(tc.bi, tc.bi != nil); got != tc.want {
			t.Errorf("got %q\nwant %q", got, tc.want)
		}
	}
	if got := versionLine(); !strings.HasPrefix(got, "weightfs ") || strings.Contains(got, "dev\n") {
		t.Errorf("versionLine() = %q", got)
	}
}
