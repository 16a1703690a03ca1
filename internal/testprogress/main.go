// Command testprogress turns `go test -json` on stdin into what a person (or CI) watching
// `make test` needs, as it happens: each package's own closing line (`ok  pkg 12.3s`,
// `FAIL pkg ...`) verbatim, every failing test with its whole output, each test that took
// long when it ends, and while nothing ends a line every two minutes naming the tests still
// running and for how long. A test's output is held until it ends and printed only if it
// failed, so a passing run prints about one line per package. scripts/test.sh runs it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// slow is how long a passing test runs before its end is worth a line.
const slow = 20 * time.Second

// quiet is how long the output may stay silent before a line names the running tests.
const quiet = 2 * time.Minute

type key struct{ pkg, test string }

type progress struct {
	mu      sync.Mutex
	out     io.Writer
	last    time.Time                // when a line was last printed
	running map[key]time.Time        // top-level tests running, and since when
	held    map[key]*strings.Builder // their output so far
	failed  []string
	pkgs    map[string]string // package -> "ok", "FAIL" or "skip"
}

func main() {
	p := newProgress(os.Stdout)
	go func() {
		for now := range time.Tick(10 * time.Second) {
			p.beat(now)
		}
	}()
	if err := p.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testprogress:", err)
	}
	p.summary()
}

func newProgress(out io.Writer) *progress {
	return &progress{out: out, last: time.Now(), running: map[key]time.Time{}, held: map[key]*strings.Builder{},
		pkgs: map[string]string{}}
}

// read handles every line of in.
func (p *progress) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		p.line(sc.Bytes())
	}
	return sc.Err()
}

func (p *progress) printf(format string, args ...any) {
	fmt.Fprintf(p.out, format, args...)
	p.last = time.Now()
}

func (p *progress) line(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var e event
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil {
		p.printf("%s\n", b) // not an event (go's own messages): as it is
		return
	}
	top := e.Test
	if i := strings.IndexByte(top, '/'); i >= 0 {
		top = top[:i]
	}
	k := key{e.Package, top}
	switch {
	case e.Action == "build-output":
		p.printf("%s", e.Output)
	case e.Test == "" && e.Action == "output":
		if strings.HasPrefix(e.Output, "FAIL\t") {
			p.unended(e.Package) // before the package's closing line
		}
		if e.Output != "PASS\n" { // go test's own lines: ok/FAIL per package
			p.printf("%s", e.Output)
		}
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		p.pkgs[e.Package] = map[string]string{"pass": "ok", "fail": "FAIL", "skip": "skip"}[e.Action]
		p.unended(e.Package)
	case e.Test == "":
	case e.Action == "run" && top == e.Test:
		p.running[k] = time.Now()
		p.held[k] = &strings.Builder{}
	case e.Action == "output":
		if h := p.held[k]; h != nil {
			h.WriteString(e.Output)
		}
	case top == e.Test && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		took := time.Duration(e.Elapsed * float64(time.Second)).Round(100 * time.Millisecond)
		if e.Action == "fail" {
			p.failed = append(p.failed, e.Package+" "+e.Test)
			p.printf("=== %s %s failed after %s; its output:\n%s", e.Package, e.Test, took, p.held[k])
		} else if e.Action == "pass" && took >= slow {
			p.printf("    %s passed (%s, %s)\n", e.Test, e.Package, took)
		}
		delete(p.running, k)
		delete(p.held, k)
	}
}

// unended prints the output of the tests of pkg that never ended: the package timed out or
// crashed, and the panic is in their output.
func (p *progress) unended(pkg string) {
	var ks []key
	for k := range p.held {
		if k.pkg == pkg {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].test < ks[j].test })
	for _, k := range ks {
		p.failed = append(p.failed, k.pkg+" "+k.test)
		p.printf("=== %s %s never ended; its output:\n%s", k.pkg, k.test, p.held[k])
		delete(p.running, k)
		delete(p.held, k)
	}
}

// beat names the running tests if nothing was printed for a while before now.
func (p *progress) beat(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Sub(p.last) < quiet || len(p.running) == 0 {
		return
	}
	var names []string
	for k, since := range p.running {
		names = append(names, fmt.Sprintf("%s (%s, %s)", k.test, k.pkg, now.Sub(since).Round(time.Second)))
	}
	sort.Strings(names)
	p.printf("    still running: %s\n", strings.Join(names, ", "))
}

func (p *progress) summary() {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := map[string]int{}
	for _, r := range p.pkgs {
		n[r]++
	}
	p.printf("%d packages: %d ok, %d failed, %d without tests\n", len(p.pkgs), n["ok"], n["FAIL"], n["skip"])
	if len(p.failed) > 0 {
		p.printf("failed tests: %s\n", strings.Join(p.failed, ", "))
	}
	if n["FAIL"] > 0 || len(p.failed) > 0 {
		p.printf("FAIL\n")
	}
}
