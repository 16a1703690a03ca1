package main

import (
	"strings"
	"testing"
	"time"
)

// TestProgress feeds a `go test -json` stream of two packages (one passes, one has a failing
// subtest and a test cut off by the timeout) and checks what is printed: go test's closing
// lines verbatim, a failure's whole output, a cut-off test's panic, a passing test's output
// not at all, and a summary ending in FAIL.
func TestProgress(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"p/ok"}`,
		`{"Action":"run","Package":"p/ok","Test":"TestFine"}`,
		`{"Action":"output","Package":"p/ok","Test":"TestFine","Output":"secret of a passing test\n"}`,
		`{"Action":"pass","Package":"p/ok","Test":"TestFine","Elapsed":0.5}`,
		`{"Action":"output","Package":"p/ok","Output":"PASS\n"}`,
		`{"Action":"output","Package":"p/ok","Output":"ok  \tp/ok\t0.6s\n"}`,
		`{"Action":"pass","Package":"p/ok","Elapsed":0.6}`,
		`{"Action":"run","Package":"p/bad","Test":"TestBad"}`,
		`{"Action":"run","Package":"p/bad","Test":"TestBad/sub"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestBad/sub","Output":"    x_test.go:3: the reason\n"}`,
		`{"Action":"fail","Package":"p/bad","Test":"TestBad/sub","Elapsed":0}`,
		`{"Action":"fail","Package":"p/bad","Test":"TestBad","Elapsed":0.1}`,
		`{"Action":"run","Package":"p/bad","Test":"TestSlow"}`,
		`{"Action":"output","Package":"p/bad","Test":"TestSlow","Output":"panic: test timed out after 45m0s\n"}`,
		`{"Action":"output","Package":"p/bad","Output":"FAIL\tp/bad\t2700.1s\n"}`,
		`{"Action":"fail","Package":"p/bad","Elapsed":2700.1}`,
		`not json: go's own message`,
	}, "\n") + "\n"
	var out strings.Builder
	p := newProgress(&out)
	if err := p.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	p.summary()
	got := out.String()
	for _, want := range []string{
		"ok  \tp/ok\t0.6s\n",
		"=== p/bad TestBad failed after 100ms; its output:\n",
		"    x_test.go:3: the reason\n",
		// The cut-off test's panic comes before its package's closing line.
		"=== p/bad TestSlow never ended; its output:\npanic: test timed out after 45m0s\nFAIL\tp/bad\t2700.1s\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"secret of a passing test", "PASS\n"} {
		if strings.Contains(got, not) {
			t.Errorf("output holds %q:\n%s", not, got)
		}
	}
	if !strings.HasSuffix(got, "not json: go's own message\n2 packages: 1 ok, 1 failed, 0 without tests\nfailed tests: p/bad TestBad, p/bad TestSlow\nFAIL\n") {
		t.Errorf("the end of the output:\n%s", got)
	}
}

// TestBeat: the running tests are named only after a silence.
func TestBeat(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out)
	p.line([]byte(`{"Action":"run","Package":"p","Test":"TestLong"}`))
	now := time.Now()
	p.beat(now.Add(time.Minute))
	if out.Len() != 0 {
		t.Fatalf("a line after a minute of silence: %q", out.String())
	}
	p.beat(now.Add(3 * time.Minute))
	if got := out.String(); !strings.HasPrefix(got, "    still running: TestLong (p, 3m") {
		t.Fatalf("after three minutes: %q", got)
	}
}
