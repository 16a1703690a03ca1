package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
)

func TestLinkNames(t *testing.T) {
	for _, pid := range []int{1, 249, 250, 4194304, 99999999} {
		ns, h, n, hip, nip := linkNames(pid)
		if len(h) > 15 || len(n) > 15 {
			t.Errorf("pid %d: device names %q %q longer than IFNAMSIZ-1", pid, h, n)
		}
		if h == n || !strings.HasPrefix(ns, "wfsbench-") {
			t.Errorf("pid %d: names %q %q %q", pid, ns, h, n)
		}
		if strings.TrimSuffix(hip, ".1") != strings.TrimSuffix(nip, ".2") || hip == nip {
			t.Errorf("pid %d: addresses %s %s not one /30", pid, hip, nip)
		}
	}
}

// TestRunFetch copies two files from an HTTP server and counts their bytes; a 404 fails.
func TestRunFetch(t *testing.T) {
	src := makeTree(t, map[string][]byte{"a.safetensors": patterned(1<<20+3, 7), "config.json": []byte("{}")})
	srv := httptest.NewServer(http.FileServer(http.Dir(src)))
	defer srv.Close()
	dst := t.TempDir()
	var out, errb bytes.Buffer
	if code := runFetch([]string{dst, srv.URL + "/a.safetensors", srv.URL + "/config.json"}, &out, &errb); code != 0 {
		t.Fatalf("fetch: %d: %s", code, errb.String())
	}
	if strings.TrimSpace(out.String()) != "1048581" {
		t.Errorf("fetch printed %q, want 1048581", out.String())
	}
	for _, name := range []string{"a.safetensors", "config.json"} {
		want, _ := os.ReadFile(filepath.Join(src, name))
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs after fetch (%v)", name, err)
		}
	}
	if code := runFetch([]string{dst, srv.URL + "/missing"}, &out, &errb); code != 1 {
		t.Errorf("fetch of a missing file: exit %d, want 1", code)
	}
	if code := runFetch([]string{dst}, &out, &errb); code != 2 {
		t.Errorf("fetch without URLs: exit %d, want 2", code)
	}
}

// TestSyncRowsBreakdown checks that the phases of figure 9 add up to the total.
func TestSyncRowsBreakdown(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	t1 := t0.Add(time.Minute)
	r := &syncResult{
		Bytes: 2e9,
		Read: syncRound{Write: writeStats{Start: t0, LastWrite: at(2), End: at(2)}, Sealed: at(2.1),
			Ev: syncEvents{Manifest: at(2.6), LastObject: at(3.0), Latest: at(3.1), Objects: 40e6, Manifests: 1e6}},
		Verified: at(5), BroughtFwd: at(3.5), BaseSeconds: 17,
		Follow: syncRound{Write: writeStats{Start: t1}, Sealed: t1.Add(time.Second),
			Ev: syncEvents{Latest: t1.Add(2 * time.Second), Applying: t1.Add(4500 * time.Millisecond), Follower: t1.Add(6 * time.Second)}},
	}
	rows := syncRows(r, configForTest(t))
	for i := range rows {
		rows[i].finish()
	}
	if rows[0].Measured != 3.1 || rows[1].Measured != 6 || rows[0].Status != StatusFail {
		t.Fatalf("totals %+v %+v", rows[0], rows[1])
	}
	var sum, follower float64
	for _, r := range rows[2:] {
		switch {
		case strings.HasPrefix(r.Name, "  follower"):
			follower += r.Measured
		case strings.HasPrefix(r.Name, "  bring-forward"): // a part of the switch
		case strings.HasPrefix(r.Name, "  after it"): // the read back, after the clock stopped
			if r.Measured != 5-3.1 {
				t.Fatalf("read back %v s, want %v", r.Measured, 5-3.1)
			}
		default:
			sum += r.Measured
		}
	}
	if d := sum - rows[0].Measured; d > 1e-9 || d < -1e-9 {
		t.Fatalf("phases sum to %v, total %v", sum, rows[0].Measured)
	}
	// The follower's phases after the reader's latest moved, and the time until then.
	if d := follower + 2 - rows[1].Measured; d > 1e-9 || d < -1e-9 {
		t.Fatalf("the follower's phases sum to %v after the reader's 2 s, total %v", follower, rows[1].Measured)
	}
}

func configForTest(t *testing.T) gen.Config {
	t.Helper()
	cfg, err := gen.Preset("tiny", 3e-6, 1)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
