package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// humanBytesText is cmd/weightfs's humanBytes: the text output's sizes, recomputed from the
// JSON's exact numbers.
func humanBytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func decodeJSON(t *testing.T, what, s string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: not the documented JSON: %v\n%s", what, err, s)
	}
	if dec.More() {
		t.Fatalf("%s: more than one JSON value:\n%s", what, s)
	}
}

// The documented shapes (docs/cli.md), decoded strictly: a field renamed or added without
// the documentation fails here.
type logOut struct {
	Versions []struct {
		Version         uint64 `json:"version"`
		Name            string `json:"name"`
		Created         string `json:"created"`
		Files           int    `json:"files"`
		LogicalBytes    int64  `json:"logical_bytes"`
		StoredBytes     int64  `json:"stored_bytes"`
		Anchor          bool   `json:"anchor"`
		Previous        uint64 `json:"previous"`
		ChangedElements int64  `json:"changed_elements"`
		TotalElements   int64  `json:"total_elements"`
		DiskBytes       int64  `json:"disk_bytes"`
	} `json:"versions"`
	Total struct {
		LogicalBytes      int64 `json:"logical_bytes"`
		StoredBytes       int64 `json:"stored_bytes"`
		DiskBytes         int64 `json:"disk_bytes"`
		UnreferencedBytes int64 `json:"unreferenced_bytes"`
	} `json:"total"`
	Damaged []uint64 `json:"damaged"`
}

type diffOut struct {
	A       uint64 `json:"a"`
	B       uint64 `json:"b"`
	Tensors []struct {
		File     string  `json:"file"`
		Tensor   string  `json:"tensor"`
		DType    string  `json:"dtype"`
		Shape    []int64 `json:"shape"`
		Elements int64   `json:"elements"`
		Changed  int64   `json:"changed"`
		Status   string  `json:"status"`
	} `json:"tensors"`
	Total struct {
		Changed  int64 `json:"changed"`
		Elements int64 `json:"elements"`
	} `json:"total"`
}

type verifyOut struct {
	OK       bool  `json:"ok"`
	Versions int   `json:"versions"`
	Objects  int   `json:"objects"`
	Bytes    int64 `json:"bytes"`
	Damaged  []struct {
		Version uint64 `json:"version"`
		Object  string `json:"object"`
		Path    string `json:"path"`
		Error   string `json:"error"`
		Text    string `json:"text"`
	} `json:"damaged"`
	Quarantined []string `json:"quarantined"`
	Caches      []struct {
		Name    string `json:"name"`
		Path    string `json:"path"`
		Checked bool   `json:"checked"`
		Damaged bool   `json:"damaged"`
		Note    string `json:"note"`
	} `json:"caches"`
}

// cacheLines is what the text output of verify prints of the caches in vf.
func (vf verifyOut) cacheLines() string {
	var b strings.Builder
	for _, c := range vf.Caches {
		state := "ok"
		switch {
		case c.Damaged:
			state = "DAMAGED"
		case !c.Checked:
			state = "not checked"
		}
		fmt.Fprintf(&b, "cache: %s %s: %s: %s\n", c.Name, c.Path, state, c.Note)
	}
	return b.String()
}

type gpusOut struct {
	GPUSupport bool `json:"gpu_support"`
	NVML       struct {
		Library       string            `json:"library"`
		Loaded        bool              `json:"loaded"`
		Reason        string            `json:"reason"`
		DriverVersion string            `json:"driver_version"`
		NVMLVersion   string            `json:"nvml_version"`
		GPUs          []json.RawMessage `json:"gpus"`
		Problems      []string          `json:"problems"`
	} `json:"nvml"`
	OpenCL struct {
		Library string `json:"library"`
		Loaded  bool   `json:"loaded"`
		Reason  string `json:"reason"`
		Devices []struct {
			Platform      string `json:"platform"`
			Name          string `json:"name"`
			Vendor        string `json:"vendor"`
			Type          string `json:"type"`
			Version       string `json:"version"`
			DriverVersion string `json:"driver_version"`
			ComputeUnits  uint32 `json:"compute_units"`
			GlobalMemory  uint64 `json:"global_memory"`
			PCI           string `json:"pci"`
		} `json:"devices"`
		Problems []string `json:"problems"`
	} `json:"opencl"`
	Auto struct {
		Backend string `json:"backend"`
		Device  string `json:"device"`
		Reason  string `json:"reason"`
	} `json:"auto"`
	GPUMode      string `json:"gpu_mode"`
	ChunkBytes   int    `json:"chunk_bytes"`
	MemoryNeeded uint64 `json:"memory_needed"`
}

// TestCLIJSONLogDiffVerify: log, diff and verify --json parse as the documented shapes and
// carry the numbers the text output prints (recomputed from them, row by row), on a clean
// store and, for verify, on a damaged one.
func TestCLIJSONLogDiffVerify(t *testing.T) {
	t.Setenv("WEIGHTFS_LOOSE_OBJECTS", "1") // it reads loose object files (store format 2's layout)
	storeDir, _ := smallStore(t, 200_000, 3)

	// log: one text row per version, the same numbers.
	text := mustCLI(t, "log", storeDir).stdout
	var lg logOut
	decodeJSON(t, "log --json", mustCLI(t, "log", "--json", storeDir).stdout, &lg)
	rows := strings.Split(strings.TrimSpace(text), "\n")
	if len(lg.Versions) != 3 || len(rows) != 1+3+1 || len(lg.Damaged) != 0 {
		t.Fatalf("log: %d JSON versions, %d text rows:\n%s", len(lg.Versions), len(rows), text)
	}
	var logical, stored, disk int64
	for i, v := range lg.Versions {
		changed := "anchor"
		if !v.Anchor {
			changed = fmt.Sprintf("%.3f%%", pct(v.ChangedElements, v.TotalElements))
		}
		f := strings.Fields(rows[1+i])
		want := []string{v.Name, strconv.Itoa(v.Files), humanBytesText(v.LogicalBytes), humanBytesText(v.StoredBytes),
			fmt.Sprintf("%.2f%%", pct(v.StoredBytes, v.LogicalBytes)), changed, humanBytesText(v.DiskBytes)}
		got := []string{f[0], f[3], f[4] + " " + f[5], f[6] + " " + f[7], f[8], f[9], f[10] + " " + f[11]}
		if strings.Join(got, "|") != strings.Join(want, "|") || v.Name != fmt.Sprintf("weight_v%06d", v.Version) {
			t.Errorf("log row %d: text %q, JSON gives %q", i, got, want)
		}
		logical += v.LogicalBytes
		stored += v.StoredBytes
		disk += v.DiskBytes
	}
	wantTotal := fmt.Sprintf("total %s %s %.2f%% %s", humanBytesText(logical), humanBytesText(stored), pct(stored, logical), humanBytesText(lg.Total.DiskBytes))
	if got := strings.Join(strings.Fields(rows[4]), " "); got != wantTotal || lg.Total.LogicalBytes != logical || lg.Total.StoredBytes != stored ||
		lg.Total.DiskBytes != disk+lg.Total.UnreferencedBytes || lg.Total.DiskBytes != objectBytes(t, storeDir) {
		t.Errorf("log total: text %q, JSON %+v (sum %d/%d, want %q)", got, lg.Total, logical, stored, wantTotal)
	}

	// diff --all: the same rows and totals.
	text = mustCLI(t, "diff", "--all", storeDir, "1", "3").stdout
	var df diffOut
	decodeJSON(t, "diff --json", mustCLI(t, "diff", "--all", "--json", storeDir, "1", "3").stdout, &df)
	rows = strings.Split(strings.TrimSpace(text), "\n")
	if df.A != 1 || df.B != 3 || len(df.Tensors) == 0 || len(rows) != 1+len(df.Tensors)+1 {
		t.Fatalf("diff: JSON a=%d b=%d with %d rows, text %d lines:\n%s", df.A, df.B, len(df.Tensors), len(rows), text)
	}
	var changedSum int64
	for i, d := range df.Tensors {
		frac := fmt.Sprintf("%.4f%%", pct(d.Changed, d.Elements))
		if d.Status != "" {
			frac = d.Status
		}
		want := strings.Join(strings.Fields(fmt.Sprintf("%s %s %d %d %s", d.File, d.Tensor, d.Changed, d.Elements, frac)), " ")
		if got := strings.Join(strings.Fields(rows[1+i]), " "); got != want {
			t.Errorf("diff row %d: text %q, JSON gives %q", i, got, want)
		}
		if d.Tensor != "" {
			changedSum += d.Changed
		}
	}
	wantTotal = fmt.Sprintf("total %d %d %.4f%%", df.Total.Changed, df.Total.Elements, pct(df.Total.Changed, df.Total.Elements))
	if got := strings.Join(strings.Fields(rows[len(rows)-1]), " "); got != wantTotal || changedSum != df.Total.Changed || df.Total.Changed == 0 {
		t.Errorf("diff total: text %q, JSON %+v (rows sum %d)", got, df.Total, changedSum)
	}

	// verify, clean.
	var vf verifyOut
	decodeJSON(t, "verify --json", mustCLI(t, "verify", "--json", storeDir).stdout, &vf)
	want := fmt.Sprintf("verified %d versions, %d objects: no damage\n", vf.Versions, vf.Objects) + vf.cacheLines()
	if got := mustCLI(t, "verify", storeDir).stdout; got != want || !vf.OK || vf.Versions != 3 || len(vf.Damaged) != 0 || vf.Bytes == 0 || len(vf.Caches) == 0 || !vf.Caches[0].Checked {
		t.Errorf("verify: text %q, JSON %+v", got, vf)
	}

	// verify, damaged: the same exit status, one JSON finding per DAMAGED line, same text.
	obj := objectFiles(t, storeDir)[0]
	b, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x5a
	if err := os.WriteFile(obj, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tr, jr := runCLI(t, "verify", storeDir), runCLI(t, "verify", "--json", storeDir)
	if tr.code != 1 || jr.code != 1 {
		t.Fatalf("verify of a damaged store: exit %d (text), %d (json), want 1", tr.code, jr.code)
	}
	vf = verifyOut{}
	decodeJSON(t, "verify --json (damaged)", jr.stdout, &vf)
	var lines []string
	for _, d := range vf.Damaged {
		lines = append(lines, "DAMAGED "+d.Text)
	}
	if vf.OK || len(vf.Damaged) == 0 || strings.Join(lines, "\n")+"\n"+vf.cacheLines() != tr.stdout {
		t.Errorf("verify damaged: text\n%s\nJSON %+v", tr.stdout, vf)
	}
}

// TestCLIJSONGPUs: gpus --json parses as documented and says what the text report says.
func TestCLIJSONGPUs(t *testing.T) {
	text := mustCLI(t, "gpus").stdout
	var g gpusOut
	decodeJSON(t, "gpus --json", mustCLI(t, "gpus", "--json").stdout, &g)
	nvmlLine := fmt.Sprintf("NVML (%s): %s", g.NVML.Library, g.NVML.Reason)
	if len(g.NVML.GPUs) > 0 {
		nvmlLine = fmt.Sprintf("NVML (%s): %d GPU", g.NVML.Library, len(g.NVML.GPUs))
	}
	for _, want := range []string{nvmlLine, fmt.Sprintf("--diff auto runs %s: %s\n", g.Auto.Backend, g.Auto.Reason),
		"--diff gpu " + g.GPUMode + "\n", fmt.Sprintf("OpenCL (%s): ", g.OpenCL.Library)} {
		if !strings.Contains(text, want) {
			t.Errorf("gpus text lacks %q (from the JSON):\n%s", want, text)
		}
	}
	for _, d := range g.OpenCL.Devices {
		if !strings.Contains(text, fmt.Sprintf("%q", d.Name)) {
			t.Errorf("gpus text lacks OpenCL device %q", d.Name)
		}
	}
	if !g.GPUSupport || g.Auto.Backend == "" || g.ChunkBytes == 0 {
		t.Errorf("gpus --json: %+v", g)
	}
}
