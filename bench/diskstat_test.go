package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseDiskstats(t *testing.T) {
	const text = `   7       0 loop0 10 0 80 0 20 0 160 0 0 0 0 0 0 0 0 0 0
 254       0 vda 1000 5 2048 300 400 7 4096 500 0 600 800 0 0 0 0 0 0
 254       1 vda1 900 5 2000 300 400 7 4000 500 0 600 800 0 0 0 0 0 0
 259       0 nvme0n1 1 0 8 0 2 0 16 0 0 0 0
`
	disks := map[string]bool{"vda": true, "nvme0n1": true}
	read, written, err := parseDiskstats([]byte(text), func(n string) bool { return disks[n] })
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(2048+8) * 512; read != want {
		t.Errorf("read %d, want %d", read, want)
	}
	if want := int64(4096+16) * 512; written != want {
		t.Errorf("written %d, want %d", written, want)
	}
	for _, bad := range []string{
		"254 0 vda 1 2 3",
		"254 0 vda 1 0 x 0 1 0 8 0 0 0 0",
		"254 0 vda 1 0 -8 0 1 0 8 0 0 0 0",
	} {
		if _, _, err := parseDiskstats([]byte(bad), func(string) bool { return true }); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseIOWait(t *testing.T) {
	const text = "cpu  100 2 300 4000 250 0 7 0 0 0\ncpu0 50 1 150 2000 125 0 3 0 0 0\nintr 1 2\n"
	got, err := parseIOWait([]byte(text))
	if err != nil || got != 2500*time.Millisecond {
		t.Fatalf("iowait %v, %v; want 2.5s", got, err)
	}
	for _, bad := range []string{"intr 1 2\n", "cpu 1 2 3\n", "cpu 1 2 3 4 x 6\n"} {
		if _, err := parseIOWait([]byte(bad)); err == nil || !strings.Contains(err.Error(), "/proc/stat") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}
