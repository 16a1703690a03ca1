package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// logSource is a checkpoint directory of files that are not safetensors: each is stored
// whole, and the store says so once per file, at debug level.
func logSource(t *testing.T) string {
	return writeTree(t, map[string][]byte{"config.json": []byte(`{"model_type":"llama"}`), "notes.txt": []byte("hello\n")})
}

// TestLogJSONLines commits through the CLI with --log-format json --log-level debug: every
// line on stderr is one JSON object with time, level and msg, and the per-file lines of the
// commit are there, at DEBUG, with the file as an attribute.
func TestLogJSONLines(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	mustCLI(t, "init", store)
	r := mustCLI(t, "commit", "--log-format", "json", "--log-level", "debug", "--diff", "auto", store, logSource(t))
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	perFile := map[string]bool{}
	for _, line := range lines {
		var rec struct {
			Time  string `json:"time"`
			Level string `json:"level"`
			Msg   string `json:"msg"`
			File  string `json:"file"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("stderr line is not JSON: %v\n%s", err, line)
		}
		if _, err := time.Parse(time.RFC3339Nano, rec.Time); err != nil || rec.Level == "" || rec.Msg == "" {
			t.Errorf("line without time, level or msg: %s", line)
		}
		if rec.Msg == "not a safetensors file: stored whole" {
			if rec.Level != "DEBUG" {
				t.Errorf("per-file line at %s, want DEBUG: %s", rec.Level, line)
			}
			perFile[rec.File] = true
		}
	}
	if !perFile["config.json"] || !perFile["notes.txt"] || len(perFile) != 2 {
		t.Errorf("per-file lines for %v, want config.json and notes.txt:\n%s", perFile, r.stderr)
	}
	if !strings.Contains(r.stderr, `"msg":"diff backend: cpu"`) && !strings.Contains(r.stderr, `"msg":"diff backend: opencl"`) {
		t.Errorf("no diff backend line (info) among the JSON lines:\n%s", r.stderr)
	}
}

// TestLogLevels commits the same tree at each level: per-file lines only at debug; the info
// line of the diff backend at info and debug but not at warn; and a warning (a damaged index,
// recreated) at warn too.
func TestLogLevels(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	mustCLI(t, "init", store)
	src := logSource(t)
	for _, tc := range []struct {
		flags               []string
		perFile, info, warn bool
	}{
		{nil, false, true, true},
		{[]string{"--log-level", "debug"}, true, true, true},
		{[]string{"--log-level", "info"}, false, true, true},
		{[]string{"--log-level", "warn"}, false, false, true},
		{[]string{"--log-level", "error"}, false, false, false},
	} {
		// A damaged index: the writer deletes and recreates it, with a warning.
		if err := os.WriteFile(filepath.Join(store, "cache", "index.db"), []byte(strings.Repeat("damaged index ", 1000)), 0o600); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		args := append(append([]string{"commit", "--diff", "auto"}, tc.flags...), store, src)
		r := mustCLI(t, args...)
		for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			if line != "" && (!strings.HasPrefix(line, "time=") || !strings.Contains(line, " level=") || !strings.Contains(line, " msg=")) {
				t.Errorf("%v: a line without time, level or msg: %q", tc.flags, line)
			}
		}
		has := func(s string) bool { return strings.Contains(r.stderr, s) }
		if got := has(`level=DEBUG msg="not a safetensors file: stored whole" file=notes.txt`); got != tc.perFile {
			t.Errorf("%v: per-file line present %v, want %v:\n%s", tc.flags, got, tc.perFile, r.stderr)
		}
		if got := has(`level=INFO msg="diff backend: `); got != tc.info {
			t.Errorf("%v: info line present %v, want %v:\n%s", tc.flags, got, tc.info, r.stderr)
		}
		if got := has(`level=WARN msg="index was damaged: deleted and recreated`); got != tc.warn {
			t.Errorf("%v: warning present %v, want %v:\n%s", tc.flags, got, tc.warn, r.stderr)
		}
	}
	if r := runCLI(t, "log", "--log-level", "verbose", store); r.code != 2 || !strings.Contains(r.stderr, "want debug, info, warn or error") {
		t.Errorf("--log-level verbose: exit %d, %q; want a usage error", r.code, r.stderr)
	}
	if r := runCLI(t, "log", "--log-format", "xml", store); r.code != 2 || !strings.Contains(r.stderr, "want text or json") {
		t.Errorf("--log-format xml: exit %d, %q; want a usage error", r.code, r.stderr)
	}
}

// TestLogFileMount runs the demo's trainer mount with --log-file and -o log_level=debug: the
// daemon's stderr stays empty, and the file holds the serving line, the seal (info) and the
// per-file lines of what was written (debug), each with a time stamp.
func TestLogFileMount(t *testing.T) {
	weightfsBin(t) // the CLI, not tests/mountd
	work := t.TempDir()
	store, mnt, logFile := filepath.Join(work, "store"), filepath.Join(work, "mnt"), filepath.Join(work, "weightfs.log")
	initStore(t, store)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startMount(t, store, mnt, "--log-file", logFile, "-o", "log_level=debug")
	writeVersion := func(n int) {
		v := versionDir(mnt, n)
		if err := os.Mkdir(v, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string]string{"notes.txt": "hello\n", "config.json": "{}"} {
			if err := os.WriteFile(filepath.Join(v, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(v, "DONE"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeVersion(1)
	// logrotate's way: move the file, signal SIGUSR1, and the daemon writes a new one.
	rotated := logFile + ".1"
	if err := os.Rename(logFile, rotated); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(logFile); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no new log file after SIGUSR1: %v", err)
		}
	}
	writeVersion(2)
	d.stop()
	if out := d.out.String(); out != "" {
		t.Errorf("the daemon wrote to stderr/stdout with --log-file:\n%s", out)
	}
	read := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if !strings.HasPrefix(line, "time=") {
				t.Errorf("%s: a line without a time stamp: %q", p, line)
			}
		}
		return string(data)
	}
	for p, wants := range map[string][]string{
		rotated: {
			`level=INFO msg="serving ` + store + ` read-write at ` + mnt,
			`level=INFO msg="sealed version" version=1 files=2`,
			`level=DEBUG msg="not a safetensors file: stored whole" file=notes.txt`,
		},
		logFile: {
			`level=INFO msg="sealed version" version=2 files=2`,
			`level=INFO msg=unmounting signal=terminated`,
		},
	} {
		log := read(p)
		for _, want := range wants {
			if !strings.Contains(log, want) {
				t.Errorf("%s lacks %q:\n%s", p, want, log)
			}
		}
	}
}

// TestVersion builds the binary as CI does, from a git checkout, and checks that --version
// names the revision `git rev-parse HEAD` gives; built with -buildvcs=false it says it has
// none.
func TestVersion(t *testing.T) {
	root := repoRoot()
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	head := strings.TrimSpace(string(out))
	src := root
	if fi, err := os.Stat(filepath.Join(root, ".git")); err == nil && !fi.IsDir() {
		// A linked worktree (.git is a file): the go command stamps VCS information only
		// where .git is a directory. Build a clone of HEAD instead, as CI would.
		src = filepath.Join(t.TempDir(), "clone")
		for _, args := range [][]string{{"clone", "--quiet", "--shared", "--no-checkout", root, src}, {"-C", src, "checkout", "--quiet", "--detach", head}} {
			if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
	}
	build := func(vcs string) string {
		bin := filepath.Join(t.TempDir(), "weightfs")
		cmd := exec.Command("go", "build", "-buildvcs="+vcs, "-o", bin, "./cmd/weightfs")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build -buildvcs=%s: %v\n%s", vcs, err, out)
		}
		return bin
	}
	version := func(bin string, arg string) string {
		out, err := exec.Command(bin, arg).Output()
		if err != nil {
			t.Fatalf("%s %s: %v", bin, arg, err)
		}
		return strings.TrimSpace(string(out))
	}
	// The binary the other tests run (buildCLI) is go build's default, -buildvcs=auto, which
	// in a checkout stamps the revision as -buildvcs=true does: when it has HEAD's, it is
	// the binary to check, and a link fewer (make test's time); else build one.
	bin := weightfsBin(t)
	if src != root || !strings.Contains(version(bin, "--version"), "revision "+head) {
		bin = build("true")
	}
	got := version(bin, "--version")
	if !strings.HasPrefix(got, "weightfs ") || !strings.Contains(got, "revision "+head) || strings.Contains(got, "dev,") {
		t.Errorf("--version = %q, want the revision %s", got, head)
	}
	if v := version(bin, "version"); v != got {
		t.Errorf("version = %q, --version = %q", v, got)
	}
	if got := version(build("false"), "--version"); !strings.Contains(got, "no VCS revision") {
		t.Errorf("built with -buildvcs=false: --version = %q, want it to say there is no revision", got)
	}
}
