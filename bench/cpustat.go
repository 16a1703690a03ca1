package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of the times in /proc/PID/stat: 100 on every Linux
// architecture Go runs on (the kernel scales its own HZ to it for user space).
const clockTicks = 100

// cpuTime is the CPU a process has used: user and system time, from /proc/PID/stat.
type cpuTime struct {
	User, Sys time.Duration
}

// Seconds is user + system time in seconds.
func (c cpuTime) Seconds() float64 { return (c.User + c.Sys).Seconds() }

// sub is the CPU used between two readings of the same process.
func (c cpuTime) sub(o cpuTime) cpuTime { return cpuTime{User: c.User - o.User, Sys: c.Sys - o.Sys} }

// parseProcStat extracts utime and stime (fields 14 and 15, in clock ticks) from the text of
// /proc/PID/stat. The second field, the command name in parentheses, may itself hold spaces and
// parentheses, so the fields are counted from the last ')'.
func parseProcStat(b []byte) (cpuTime, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return cpuTime{}, fmt.Errorf("/proc stat: no ')' after the command name")
	}
	// After ')': field 3 (state) is the first; utime is field 14, stime 15.
	f := strings.Fields(string(b[end+1:]))
	const utime = 14 - 3
	if len(f) <= utime+1 {
		return cpuTime{}, fmt.Errorf("/proc stat: %d fields after the command name, want at least %d", len(f), utime+2)
	}
	var ticks [2]int64
	for i := range ticks {
		v, err := strconv.ParseInt(f[utime+i], 10, 64)
		if err != nil || v < 0 || v > 1<<50 {
			return cpuTime{}, fmt.Errorf("/proc stat: field %d is %q, not a tick count", 14+i, f[utime+i])
		}
		ticks[i] = v
	}
	tick := time.Second / clockTicks
	return cpuTime{User: time.Duration(ticks[0]) * tick, Sys: time.Duration(ticks[1]) * tick}, nil
}

// readCPU reads the CPU time process pid has used so far.
func readCPU(pid int) (cpuTime, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpuTime{}, fmt.Errorf("read the CPU time of process %d: %w", pid, err)
	}
	return parseProcStat(b)
}

// cpuPerGB is CPU seconds per 10^9 bytes.
func cpuPerGB(c cpuTime, bytes int64) float64 {
	if bytes <= 0 {
		return 0
	}
	return c.Seconds() / (float64(bytes) / 1e9)
}
