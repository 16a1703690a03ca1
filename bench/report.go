package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Status is where a figure stands against its goal.
type Status string

// Statuses of a row.
const (
	StatusPass  Status = "PASS"  // the goal is met
	StatusFail  Status = "FAIL"  // the goal is missed
	StatusInfo  Status = "INFO"  // printed for comparison; no goal of its own
	StatusSkip  Status = "SKIP"  // not measured (the note says why)
	StatusError Status = "ERROR" // the measurement failed (the note has the error)
)

// Goal is a bound on a row's measured value or on its ratio to the baseline.
type Goal struct {
	AtMost  bool    // true: value <= Limit; false: value >= Limit
	Limit   float64 // the bound
	OfRatio bool    // the bound applies to Ratio, else to Measured
	Unit    string  // printed after Limit when !OfRatio
}

// atMost and atLeast build goals on the measured value; ratioAtMost and ratioAtLeast on the
// ratio measured/baseline.
func atMost(limit float64, unit string) *Goal  { return &Goal{AtMost: true, Limit: limit, Unit: unit} }
func ratioAtMost(limit float64) *Goal          { return &Goal{AtMost: true, Limit: limit, OfRatio: true} }
func ratioAtLeast(limit float64) *Goal         { return &Goal{Limit: limit, OfRatio: true} }
func atLeast(limit float64, unit string) *Goal { return &Goal{Limit: limit, Unit: unit} }

// String is the goal as the table prints it: "<= 1.15 B/elt", ">= 0.5x".
func (g *Goal) String() string {
	if g == nil {
		return "-"
	}
	op := ">="
	if g.AtMost {
		op = "<="
	}
	if g.OfRatio {
		return fmt.Sprintf("%s %gx", op, g.Limit)
	}
	return strings.TrimSpace(fmt.Sprintf("%s %g %s", op, g.Limit, g.Unit))
}

// met reports whether v satisfies the goal; NaN and infinities never do.
func (g *Goal) met(v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	if g.AtMost {
		return v <= g.Limit
	}
	return v >= g.Limit
}

// Row is one line of the result table.
type Row struct {
	Figure       string         `json:"figure"` // the figure number, "1" to "8"
	Name         string         `json:"name"`
	Measured     float64        `json:"measured"`
	Unit         string         `json:"unit"`
	Baseline     float64        `json:"baseline,omitempty"`
	BaselineName string         `json:"baseline_name,omitempty"` // empty: no baseline
	Ratio        float64        `json:"ratio,omitempty"`         // Measured/Baseline
	Goal         *Goal          `json:"-"`
	GoalText     string         `json:"goal,omitempty"`
	Status       Status         `json:"status"`
	Note         string         `json:"note,omitempty"`
	Detail       map[string]any `json:"detail,omitempty"`
}

// finish computes the ratio (when there is a baseline) and the status. A row that already has
// ERROR or SKIP keeps it.
func (r *Row) finish() {
	if r.BaselineName != "" && r.Baseline != 0 {
		r.Ratio = r.Measured / r.Baseline
	}
	if r.Goal != nil {
		r.GoalText = r.Goal.String()
	}
	if r.Status == StatusError || r.Status == StatusSkip {
		return
	}
	switch {
	case r.Goal == nil:
		r.Status = StatusInfo
	case r.Goal.OfRatio && r.BaselineName == "":
		r.Status, r.Note = StatusError, joinNote(r.Note, "goal on a ratio without a baseline")
	case r.Goal.OfRatio && r.Baseline == 0:
		r.Status, r.Note = StatusError, joinNote(r.Note, "baseline measured as 0")
	case r.Goal.OfRatio && r.Goal.met(r.Ratio), !r.Goal.OfRatio && r.Goal.met(r.Measured):
		r.Status = StatusPass
	default:
		r.Status = StatusFail
	}
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "; " + b
}

// errorRow is the row of a figure whose measurement failed.
func errorRow(figure, name string, err error) Row {
	return Row{Figure: figure, Name: name, Status: StatusError, Note: err.Error()}
}

// formatValue prints v with a precision that suits its unit.
func formatValue(v float64, unit string) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	var s string
	switch unit {
	case "B/elt", "bits/elt", "x", "GB/s":
		s = fmt.Sprintf("%.3f", v)
	case "s":
		s = fmt.Sprintf("%.2f", v)
	case "MiB/s", "MiB", "MB/s":
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.4g", v)
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}

// tableCells are the printed cells of a row: figure, name, measured, baseline, ratio, goal,
// status.
func (r *Row) tableCells() []string {
	measured, baseline, ratio := "-", "-", "-"
	if r.Status != StatusError && r.Status != StatusSkip {
		measured = formatValue(r.Measured, r.Unit)
		if r.BaselineName != "" {
			baseline = formatValue(r.Baseline, r.Unit) + " (" + r.BaselineName + ")"
			if r.Baseline != 0 {
				ratio = formatRatio(r.Ratio, r.ratioLimit()) + "x"
			}
		}
	}
	goal := r.GoalText
	if goal == "" {
		goal = "-"
	}
	return []string{r.Figure, r.Name, measured, baseline, ratio, goal, string(r.Status)}
}

// formatRatio prints a ratio to three decimals, or four where three would round it onto its
// goal's limit (0.4996 against ">= 0.5x" is not "0.500").
func formatRatio(ratio, limit float64) string {
	s := fmt.Sprintf("%.3f", ratio)
	if limit > 0 && ratio != limit && s == fmt.Sprintf("%.3f", limit) {
		s = fmt.Sprintf("%.4f", ratio)
	}
	return s
}

// ratioLimit is the bound of the row's goal on its ratio, or 0. A row read back from JSON
// has only the goal's text (">= 0.5x").
func (r *Row) ratioLimit() float64 {
	if r.Goal != nil {
		if r.Goal.OfRatio {
			return r.Goal.Limit
		}
		return 0
	}
	var op string
	var limit float64
	if n, _ := fmt.Sscanf(r.GoalText, "%s %fx", &op, &limit); n == 2 && strings.HasSuffix(r.GoalText, "x") {
		return limit
	}
	return 0
}

var tableHeader = []string{"fig", "figure", "measured", "baseline", "ratio", "goal", "status"}

// printTable writes the rows as an aligned text table, with each row's note under it.
func printTable(w io.Writer, rows []Row) {
	cells := [][]string{tableHeader}
	for i := range rows {
		cells = append(cells, rows[i].tableCells())
	}
	widths := make([]int, len(tableHeader))
	for _, line := range cells {
		for i, c := range line {
			widths[i] = max(widths[i], len(c))
		}
	}
	for k, line := range cells {
		var b strings.Builder
		for i, c := range line {
			fmt.Fprintf(&b, "%-*s", widths[i]+2, c)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if k > 0 && rows[k-1].Note != "" {
			fmt.Fprintf(w, "%*s  note: %s\n", widths[0], "", rows[k-1].Note)
		}
	}
}

// markdownTable writes the rows as a Markdown table (for docs/benchmarks.md).
func markdownTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| "+strings.Join(tableHeader, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat("---|", len(tableHeader)))
	for i := range rows {
		c := rows[i].tableCells()
		if rows[i].Note != "" {
			c[1] += " (" + rows[i].Note + ")"
		}
		for j := range c {
			c[j] = strings.ReplaceAll(c[j], "|", "\\|")
		}
		fmt.Fprintln(w, "| "+strings.Join(c, " | ")+" |")
	}
}

// Result is everything a run writes to -out.
type Result struct {
	Command  string    `json:"command"`
	Quick    bool      `json:"quick"`
	Figures  []string  `json:"figures"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Seconds  float64   `json:"seconds"`
	Machine  Machine   `json:"machine"`
	WorkDir  string    `json:"work_dir"`
	Rows     []Row     `json:"rows"`
	// FigureSeconds is the wall time of each figure, fixtures included.
	FigureSeconds map[string]float64 `json:"figure_seconds"`
	Notes         []string           `json:"notes,omitempty"`
}

// writeJSON writes res to path through a temporary file, so a reader never sees half of it.
func writeJSON(path string, res *Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	b = append(b, '\n')
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
