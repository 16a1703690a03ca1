package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Machine describes where a run took place, for docs/benchmarks.md.
type Machine struct {
	CPUs        int     `json:"nproc"`
	CPUModel    string  `json:"cpu_model"`
	MemoryBytes int64   `json:"memory_bytes"`
	Kernel      string  `json:"kernel"`
	GoVersion   string  `json:"go_version"`
	LoadStart   string  `json:"load_average_start"` // /proc/loadavg at the start
	LoadEnd     string  `json:"load_average_end"`
	WorkFS      string  `json:"work_fs"`         // file system type of the work directory
	WorkFree    int64   `json:"work_free_bytes"` // free bytes there at the start
	Root        bool    `json:"root"`
	Weightfs    string  `json:"weightfs_version"` // `weightfs --version`
	GitCommit   string  `json:"git_commit,omitempty"`
	PeakLoad    float64 `json:"peak_load_1min"` // the highest 1-minute load seen between figures
}

// describeMachine gathers what can be found; a missing piece is left empty rather than failing
// the run.
func describeMachine(workDir, weightfsBin string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Root: os.Geteuid() == 0}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = cpuModel(b)
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, ok := procField(b, "MemTotal"); ok {
			m.MemoryBytes = kb * 1024
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.LoadStart = loadAverage()
	m.WorkFS, m.WorkFree = fsInfo(workDir)
	if out, err := exec.Command(weightfsBin, "--version").Output(); err == nil {
		m.Weightfs = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		m.GitCommit = strings.TrimSpace(string(out))
	}
	return m
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverage is the first three fields of /proc/loadavg ("" if unreadable).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// load1 is the 1-minute load average (0 if unreadable).
func load1() float64 {
	f := strings.Fields(loadAverage())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// fsInfo names the file system type of dir and its free bytes.
func fsInfo(dir string) (string, int64) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "", 0
	}
	return fsTypeName(st.Type), int64(st.Bavail) * st.Bsize
}

// freeBytes is the space available to us under dir.
func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// fsTypeName maps the statfs magic numbers that matter here to names.
func fsTypeName(t int64) string {
	switch t {
	case 0xEF53:
		return "ext2/3/4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x01021994:
		return "tmpfs"
	case 0x794C7630:
		return "overlayfs"
	case 0x65735546:
		return "fuse"
	}
	return fmt.Sprintf("0x%x", t)
}

// String is the one-line description the run prints at its start.
func (m Machine) String() string {
	return fmt.Sprintf("%d CPUs (%s), %.1f GiB RAM, Linux %s, %s, load %s, work fs %s with %.1f GiB free",
		m.CPUs, m.CPUModel, float64(m.MemoryBytes)/(1<<30), m.Kernel, m.GoVersion, m.LoadStart, m.WorkFS, float64(m.WorkFree)/(1<<30))
}
