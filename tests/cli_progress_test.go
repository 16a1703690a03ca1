package tests

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// progressCommands are the long commands, each run once on a 3-version store: they all draw
// a progress bar on a terminal.
func progressCommands(storeDir, dir string) map[string][]string {
	return map[string][]string{
		"commit": {"commit", storeDir, srcDir(dir, 4)},
		"export": {"export", storeDir, "4", filepath.Join(dir, "out")},
		"verify": {"verify", storeDir},
		"patch":  {"patch", storeDir, "4", "-o", filepath.Join(dir, "v4.patch")},
		"gc":     {"gc", "--keep-last", "1", storeDir},
	}
}

// progressStore commits versions 1-3 of a generated model and writes version 4's source.
func progressStore(t *testing.T) (storeDir, dir string) {
	dir = t.TempDir()
	storeDir = filepath.Join(dir, "store")
	mustCLI(t, "init", storeDir)
	genSeries(t, dir, 2_000_000, 5, 4, func(v int, src string) {
		if v < 4 {
			mustCLI(t, "commit", storeDir, src)
		}
	})
	return storeDir, dir
}

// barLine matches one drawing of a bar: label, percentage, bar, bytes done/total, rate,
// [elapsed:left].
var barLine = regexp.MustCompile(`(commit|export|verify|patch|gc: re-anchor) +\d+% \|[^|]*\| \([0-9.]+ ?[KMG]?i?B?/[0-9.]+ [KMG]?i?B, [0-9.]+ [KMG]?i?B/s\) \[[0-9smh]+:[0-9smh]+\]`)

// TestProgressQuietInPipes: with stdout and stderr pipes, the long commands print their
// normal output and their log lines only: no bar, no carriage return, no escape sequence.
func TestProgressQuietInPipes(t *testing.T) {
	storeDir, dir := progressStore(t)
	for _, name := range []string{"commit", "export", "verify", "patch", "gc"} {
		r := mustCLI(t, progressCommands(storeDir, dir)[name]...)
		for _, s := range []string{r.stdout, r.stderr} {
			if strings.ContainsAny(s, "\r\x1b") || barLine.MatchString(s) {
				t.Errorf("%s printed progress into a pipe:\n%q", name, s)
			}
		}
		for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			if l != "" && !strings.HasPrefix(l, "time=") {
				t.Errorf("%s: stderr line %q is not a log line", name, l)
			}
		}
		// One result line; verify adds a line per node-local cache it checked, after it.
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		extra := 0
		for _, l := range lines[1:] {
			if name == "verify" && strings.HasPrefix(l, "cache: ") {
				extra++
			}
		}
		if !strings.HasSuffix(r.stdout, "\n") || len(lines) != 1+extra {
			t.Errorf("%s: stdout is not its one result line: %q", name, r.stdout)
		}
	}
}

// TestProgressOnTerminal: under a pseudo-terminal (util-linux script(1)), each long command
// draws its bar (bytes, rate, elapsed and left) and clears it before the result line.
func TestProgressOnTerminal(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) (util-linux) is not installed: no pseudo-terminal to test with")
	}
	bin := weightfsBin(t)
	storeDir, dir := progressStore(t)
	for _, name := range []string{"commit", "export", "verify", "patch", "gc"} {
		line := bin + " " + strings.Join(progressCommands(storeDir, dir)[name], " ")
		cmd := weightfsCommand(script, "-qec", line, "/dev/null")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s under script: %v\n%q", name, err, out.String())
		}
		s := out.String()
		if !barLine.MatchString(s) || !strings.Contains(s, "\r") {
			t.Errorf("%s on a terminal drew no progress bar:\n%q", name, s)
			continue
		}
		// The bar is cleared (a carriage return, then blanks) and the result line follows.
		last := s[strings.LastIndex(s, "|"):]
		if !regexp.MustCompile(`\r +\r(time=[^\r]*\r\n)*(committed|exported|verified|wrote|gc:) `).MatchString(last) {
			t.Errorf("%s: the result line does not follow the cleared bar:\n%q", name, last)
		}
	}
}
