package main

import (
	"runtime/debug"
	"strings"
)

// versionLine is what `weightfs --version` prints: the module version and the VCS revision,
// commit time and modified flag the Go toolchain stamped into the binary (go build in a git
// checkout does; -buildvcs=false, or a build outside a checkout, does not, and the line says
// so), and the Go version.
func versionLine() string {
	bi, ok := debug.ReadBuildInfo()
	return describeBuild(bi, ok)
}

func describeBuild(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "weightfs: no build information in this binary"
	}
	parts := []string{"weightfs " + bi.Main.Version}
	var rev, at, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		parts = append(parts, "no VCS revision stamped (built outside a git checkout, or with -buildvcs=false)")
	} else {
		r := "revision " + rev
		if at != "" {
			r += " (" + at + ")"
		}
		if modified == "true" {
			r += ", modified"
		}
		parts = append(parts, r)
	}
	parts = append(parts, bi.GoVersion)
	return strings.Join(parts, ", ")
}
