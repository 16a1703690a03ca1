package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// diskIO is what the machine's disks moved, and how long its CPUs waited for them: figure 2
// shows it beside the ingest, since an ingest that diffs against a copy on disk reads the
// previous version as it writes the next (docs/benchmarks-history.md, "What the figures say (session 11)").
type diskIO struct {
	Read, Written int64         // bytes, summed over the whole disks of /proc/diskstats
	IOWait        time.Duration // all CPUs' iowait time, from /proc/stat
}

func (d diskIO) sub(o diskIO) diskIO {
	return diskIO{Read: d.Read - o.Read, Written: d.Written - o.Written, IOWait: d.IOWait - o.IOWait}
}

// sectorBytes is the unit of /proc/diskstats' sector counts, whatever the device's own.
const sectorBytes = 512

// parseDiskstats sums the bytes read and written by the whole disks in the text of
// /proc/diskstats (fields 6 and 10, in 512-byte sectors): isDisk says which names are whole
// disks, so that a partition is not counted twice with its disk.
func parseDiskstats(b []byte, isDisk func(name string) bool) (read, written int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			if len(f) == 0 {
				continue
			}
			return 0, 0, fmt.Errorf("/proc/diskstats: a line of %d fields: %q", len(f), sc.Text())
		}
		if !isDisk(f[2]) {
			continue
		}
		var n [2]int64
		for i, field := range []string{f[5], f[9]} {
			v, err := strconv.ParseInt(field, 10, 64)
			if err != nil || v < 0 {
				return 0, 0, fmt.Errorf("/proc/diskstats: %s: %q is not a sector count", f[2], field)
			}
			n[i] = v
		}
		read += n[0] * sectorBytes
		written += n[1] * sectorBytes
	}
	return read, written, sc.Err()
}

// parseIOWait reads the iowait time (the fifth number of the "cpu" line, in clock ticks) from
// the text of /proc/stat.
func parseIOWait(b []byte) (time.Duration, error) {
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 6 {
			return 0, fmt.Errorf("/proc/stat: the cpu line has %d fields", len(f))
		}
		v, err := strconv.ParseInt(f[5], 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("/proc/stat: iowait %q is not a tick count", f[5])
		}
		return time.Duration(v) * (time.Second / clockTicks), nil
	}
	return 0, fmt.Errorf("/proc/stat: no cpu line")
}

// wholeDisk says whether name is a whole disk that holds files: it has /sys/block/NAME, and is
// not a loop, RAM or compressed-RAM device (whose bytes are memory, not a disk's).
func wholeDisk(name string) bool {
	for _, p := range []string{"loop", "ram", "zram"} {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	_, err := os.Stat("/sys/block/" + name)
	return err == nil
}

// readDiskIO reads the machine's disk counters now; ok is false where /proc has none.
func readDiskIO() (d diskIO, ok bool) {
	stats, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return d, false
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return d, false
	}
	if d.Read, d.Written, err = parseDiskstats(stats, wholeDisk); err != nil {
		return d, false
	}
	if d.IOWait, err = parseIOWait(stat); err != nil {
		return d, false
	}
	return d, true
}
