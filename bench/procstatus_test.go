package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

const statusSample = `Name:	weightfs
Umask:	0022
State:	S (sleeping)
VmPeak:	 1300000 kB
VmHWM:	  200000 kB
VmRSS:	  150000 kB
RssAnon:	  120000 kB
RssFile:	   30000 kB
RssShmem:	       0 kB
Threads:	12
`

func TestParseStatus(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    memStatus
		wantErr string
	}{
		{"full", statusSample, memStatus{RssAnon: 120000 << 10, VmRSS: 150000 << 10, VmHWM: 200000 << 10}, ""},
		{"no VmHWM", "VmRSS:\t10 kB\nRssAnon:\t4 kB\n", memStatus{RssAnon: 4 << 10, VmRSS: 10 << 10}, ""},
		{"no RssAnon", "VmRSS:\t10 kB\n", memStatus{}, "RssAnon"},
		{"no VmRSS", "RssAnon:\t10 kB\n", memStatus{}, "VmRSS"},
		{"not a number", "VmRSS:\tx kB\nRssAnon:\t1 kB\n", memStatus{}, "VmRSS"},
		{"negative", "VmRSS:\t-5 kB\nRssAnon:\t1 kB\n", memStatus{}, "VmRSS"},
		{"huge", "VmRSS:\t9000000000000000000 kB\nRssAnon:\t1 kB\n", memStatus{}, "range"},
		{"empty", "", memStatus{}, "RssAnon"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatus([]byte(tc.text))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseStatus = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte(statusSample))
	f.Add([]byte("RssAnon:\nVmRSS: 1"))
	f.Add([]byte("VmRSS:\t1 kB\nRssAnon:\t99999999999999999999 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseStatus(b)
		if err == nil && (m.RssAnon < 0 || m.VmRSS < 0 || m.VmHWM < 0) {
			t.Fatalf("negative memory %+v", m)
		}
	})
}

func TestProcField(t *testing.T) {
	b := []byte("MemTotal:       24000000 kB\nMemFree:  1 kB\nBad:\n")
	if v, ok := procField(b, "MemTotal"); !ok || v != 24000000 {
		t.Errorf("MemTotal = %d, %v", v, ok)
	}
	if _, ok := procField(b, "Bad"); ok {
		t.Error("an empty value parsed")
	}
	if _, ok := procField(b, "Mem"); ok {
		t.Error("a prefix of a key matched")
	}
}

func TestExited(t *testing.T) {
	for text, want := range map[string]bool{
		statusSample:                      false,
		"Name:\tx\nState:\tZ (zombie)\n":  true,
		"State:\tX (dead)\n":              true,
		"State:\tR (running)\nVmRSS: 1\n": false,
		"":                                false,
	} {
		if got := exited([]byte(text)); got != want {
			t.Errorf("exited(%q) = %v, want %v", text, got, want)
		}
	}
}

// TestRSSSamplerOwnProcess samples this test process, whose status file always exists.
func TestRSSSamplerOwnProcess(t *testing.T) {
	s := startRSSSampler(os.Getpid(), time.Millisecond)
	phase := s.Phase()
	total, hwm, err := s.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if phase.RssAnon <= 0 || total.RssAnon < phase.RssAnon || total.VmRSS < total.RssAnon || hwm < total.VmRSS {
		t.Fatalf("implausible peaks: phase %+v total %+v hwm %d", phase, total, hwm)
	}
	if total.Samples < 2 {
		t.Fatalf("%d samples, want the first and the last at least", total.Samples)
	}
	if _, _, err := s.Stop(); err != nil { // a second Stop is harmless
		t.Fatal(err)
	}
}

func TestRSSSamplerGoneProcess(t *testing.T) {
	// A pid that does not exist reads as no samples and no error (the daemon has exited).
	s := startRSSSampler(1<<22+12345, time.Millisecond)
	total, _, err := s.Stop()
	if err != nil || total.Samples != 0 {
		t.Fatalf("gone process: %+v, %v", total, err)
	}
}
