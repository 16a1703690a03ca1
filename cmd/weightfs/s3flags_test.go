package main

import (
	"flag"
	"testing"
	"time"

	"github.com/weightfs/weightfs/store/location"
	"github.com/weightfs/weightfs/store/s3"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1024", 1024, true},
		{"512M", 512 << 20, true},
		{"20G", 20 << 30, true},
		{"20GiB", 20 << 30, true},
		{"20gb", 20 << 30, true},
		{"1.5K", 1536, true},
		{"2T", 2 << 40, true},
		{"", 0, false},
		{"G", 0, false},
		{"-1G", 0, false},
		{"0", 0, false},
		{"ten", 0, false},
		{"9999999T", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1", "512M", "1.5GiB", "-3", "1e300T", "NaN", "Inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err == nil && n <= 0 {
			t.Fatalf("parseSize(%q) = %d without error", s, n)
		}
	})
}

func TestStoreFlagsApply(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	sf := addStoreFlags(fs, true)
	if err := fs.Parse([]string{"--s3-endpoint", "http://127.0.0.1:9000", "--s3-region", "r1", "--s3-path-style",
		"--s3-cache-size", "1G", "--s3-lease-ttl", "10s", "--cache-dir", "/tmp/c"}); err != nil {
		t.Fatal(err)
	}
	var opts location.Options
	if err := sf.apply(&opts); err != nil {
		t.Fatal(err)
	}
	want := s3.Config{Endpoint: "http://127.0.0.1:9000", Region: "r1", PathStyle: true, ObjectCacheBytes: 1 << 30, LeaseTTL: 10 * time.Second}
	if opts.S3 != want || opts.CacheDir != "/tmp/c" {
		t.Fatalf("options: %+v, cache dir %q", opts.S3, opts.CacheDir)
	}
	bad := addStoreFlags(flag.NewFlagSet("y", flag.ContinueOnError), false)
	*bad.cacheSize = "lots"
	if err := bad.apply(&opts); err == nil {
		t.Fatal("a bad --s3-cache-size was accepted")
	}
}
