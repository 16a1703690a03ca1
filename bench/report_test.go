package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRowFinish(t *testing.T) {
	tests := []struct {
		name       string
		row        Row
		wantStatus Status
		wantRatio  float64
	}{
		{"measured at most, met at the limit", Row{Measured: 1.15, Goal: atMost(1.15, "B/elt")}, StatusPass, 0},
		{"measured at most, missed", Row{Measured: 1.16, Goal: atMost(1.15, "B/elt")}, StatusFail, 0},
		{"ratio at least, met", Row{Measured: 60, Baseline: 100, BaselineName: "x", Goal: ratioAtLeast(0.5)}, StatusPass, 0.6},
		{"ratio at least, missed", Row{Measured: 40, Baseline: 100, BaselineName: "x", Goal: ratioAtLeast(0.5)}, StatusFail, 0.4},
		{"ratio at most, met", Row{Measured: 1, Baseline: 20, BaselineName: "x", Goal: ratioAtMost(0.1)}, StatusPass, 0.05},
		{"ratio goal without baseline", Row{Measured: 1, Goal: ratioAtMost(0.1)}, StatusError, 0},
		{"zero baseline", Row{Measured: 1, BaselineName: "x", Goal: ratioAtMost(0.1)}, StatusError, 0},
		{"NaN never passes", Row{Measured: math.NaN(), Goal: atMost(1, "")}, StatusFail, 0},
		{"no goal", Row{Measured: 3, Baseline: 6, BaselineName: "x"}, StatusInfo, 0.5},
		{"error stays", Row{Status: StatusError, Goal: atMost(1, "")}, StatusError, 0},
		{"skip stays", Row{Status: StatusSkip}, StatusSkip, 0},
		{"at least, measured", Row{Measured: 2, Goal: atLeast(2, "GB/s")}, StatusPass, 0},
	}
	for _, tc := range tests {
		r := tc.row
		r.finish()
		if r.Status != tc.wantStatus || math.Abs(r.Ratio-tc.wantRatio) > 1e-12 {
			t.Errorf("%s: status %s ratio %g, want %s %g (note %q)", tc.name, r.Status, r.Ratio, tc.wantStatus, tc.wantRatio, r.Note)
		}
	}
}

func TestGoalString(t *testing.T) {
	for g, want := range map[*Goal]string{
		atMost(1.15, "B/elt"): "<= 1.15 B/elt", ratioAtLeast(0.8): ">= 0.8x", ratioAtMost(0.1): "<= 0.1x", nil: "-",
	} {
		if got := g.String(); got != want {
			t.Errorf("goal %+v prints %q, want %q", g, got, want)
		}
	}
}

func TestTables(t *testing.T) {
	rows := []Row{
		{Figure: "1", Name: "delta size", Measured: 1.1, Unit: "B/elt", Baseline: 3.8, BaselineName: "slime", Goal: atMost(1.15, "B/elt")},
		{Figure: "2", Name: "ingest", Measured: 100, Unit: "MiB/s", Baseline: 400, BaselineName: "loop|back", Goal: ratioAtLeast(0.5), Note: "n"},
		errorRow("6", "apply", errors.New("boom")),
	}
	for i := range rows {
		rows[i].finish()
	}
	var text, md bytes.Buffer
	printTable(&text, rows)
	markdownTable(&md, rows)
	for _, want := range []string{"1.100 B/elt", "3.800 B/elt (slime)", "0.289x", "<= 1.15 B/elt", "PASS", "0.250x", "FAIL", "ERROR", "note: boom", "note: n"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text table lacks %q:\n%s", want, text.String())
		}
	}
	if lines := strings.Count(md.String(), "\n"); lines != 2+len(rows) {
		t.Errorf("markdown table has %d lines, want %d:\n%s", lines, 2+len(rows), md.String())
	}
	if !strings.Contains(md.String(), `loop\|back`) {
		t.Errorf("markdown table does not escape |:\n%s", md.String())
	}
}

func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "out.json")
	row := Row{Figure: "8", Name: "k", Measured: 2, Unit: "GB/s", Goal: atLeast(1, "GB/s")}
	row.finish()
	if err := writeJSON(path, &Result{Command: "x", Rows: []Row{row}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Rows) != 1 || back.Rows[0].Status != StatusPass || back.Rows[0].GoalText != ">= 1 GB/s" {
		t.Fatalf("read back %+v", back.Rows)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left behind: %v", err)
	}
}

func TestRunTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	row := Row{Figure: "7", Name: "store size", Measured: 200, Unit: "MiB", Baseline: 100, BaselineName: "one checkpoint", Goal: ratioAtMost(3)}
	row.finish()
	if err := writeJSON(path, &Result{Command: "go run ./bench", Rows: []Row{row}, Notes: []string{"a note"}}); err != nil {
		t.Fatal(err)
	}
	var out, errs bytes.Buffer
	if code := runTable([]string{path}, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"`go run ./bench`", "| 7 | store size | 200.0 MiB | 100.0 MiB (one checkpoint) | 2.000x | <= 3x | PASS |", "- a note"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if code := runTable([]string{filepath.Join(t.TempDir(), "missing.json")}, &out, &errs); code != 1 {
		t.Errorf("a missing file: exit %d", code)
	}
	if code := runTable(nil, &out, &errs); code != 2 {
		t.Errorf("no argument: exit %d", code)
	}
}

// TestRatioNearGoalShowsFourDecimals: a ratio that three decimals would round onto its goal's
// limit is printed with four, from the row itself and from its JSON.
func TestRatioNearGoalShowsFourDecimals(t *testing.T) {
	for _, tc := range []struct {
		measured, baseline float64
		goal               *Goal
		want               string
	}{
		{802.6, 1606.6, ratioAtLeast(0.5), "0.4996x"},
		{813, 1645, ratioAtLeast(0.5), "0.494x"},
		{1000, 2000, ratioAtLeast(0.5), "0.500x"},
		{100.2, 1000, ratioAtMost(0.1), "0.1002x"},
		{802.6, 1606.6, nil, "0.500x"},
	} {
		r := Row{Figure: "4", Name: "r", Measured: tc.measured, Baseline: tc.baseline, BaselineName: "b", Goal: tc.goal}
		r.finish()
		if got := r.tableCells()[4]; got != tc.want {
			t.Errorf("%v / %v against %v: %q, want %q", tc.measured, tc.baseline, tc.goal, got, tc.want)
		}
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Row
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatal(err)
		}
		if got := back.tableCells()[4]; got != tc.want {
			t.Errorf("%v / %v against %v, from JSON: %q, want %q", tc.measured, tc.baseline, tc.goal, got, tc.want)
		}
	}
}
