package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// testRoot holds what the tests' weightfs processes leave outside their tests' directories:
// the binaries built for them and their cache home (a read-only store's copy, an S3 writer's
// state), instead of /tmp and ~/.cache. TestMain removes it.
var testRoot string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "weightfs-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "create the tests' directory:", err)
		os.Exit(1)
	}
	testRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// weightfsCommand is exec.Command for a program the tests built, with its cache home under
// testRoot.
func weightfsCommand(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(testRoot, "cache"))
	return cmd
}

var (
	cliBuildOnce sync.Once
	cliBuildErr  error
)

// buildCLI builds cmd/weightfs into testRoot once per test binary.
func buildCLI() (string, error) {
	bin := filepath.Join(testRoot, "weightfs")
	cliBuildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/weightfs")
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			cliBuildErr = &buildError{string(out), err}
		}
	})
	return bin, cliBuildErr
}

// weightfsBin is buildCLI for tests of the CLI: they fail if it does not build.
func weightfsBin(t testing.TB) string {
	t.Helper()
	bin, err := buildCLI()
	if err != nil {
		t.Fatalf("build weightfs: %v", err)
	}
	return bin
}

type buildError struct {
	out string
	err error
}

func (b *buildError) Error() string { return b.err.Error() + ": " + b.out }

// cliResult is the outcome of one run of the binary.
type cliResult struct {
	stdout, stderr string
	code           int
}

// runCLI runs weightfs with args and returns its output and exit code.
func runCLI(t testing.TB, args ...string) cliResult {
	t.Helper()
	cmd := weightfsCommand(weightfsBin(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run weightfs %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return cliResult{out.String(), errb.String(), code}
}

// mustCLI runs weightfs and fails the test unless it exits 0.
func mustCLI(t testing.TB, args ...string) cliResult {
	t.Helper()
	r := runCLI(t, args...)
	if r.code != 0 {
		t.Fatalf("weightfs %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// treeHashes maps every regular file under dir (slash paths) to its SHA-256 in hex.
func treeHashes(t testing.TB, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := fileSHA256(p)
		if err != nil {
			return err
		}
		m[filepath.ToSlash(rel)] = h
		return nil
	})
	if err != nil {
		t.Fatalf("hash tree %s: %v", dir, err)
	}
	return m
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sameHashes fails the test unless got and want list the same files with the same hashes.
func sameHashes(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: %s: sha256 %q, want %q", what, k, got[k], want[k])
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected file %s", what, k)
		}
	}
}
