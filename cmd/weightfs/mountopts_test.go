package main

import (
	"strings"
	"testing"
	"time"
)

func TestApplyMountOptions(t *testing.T) {
	for _, tc := range []struct {
		opts string
		want mountFlags
		err  string
	}{
		{"ro,version=latest,cache_dir=/var/cache/w", mountFlags{readOnly: true, version: "latest", cacheDir: "/var/cache/w"}, ""},
		{"defaults,noauto,nofail,_netdev,x-systemd.automount,x-systemd.requires=network-online.target,rw,user", mountFlags{}, ""},
		{"allow_other,default_permissions,allow_non_empty,poll=2s,version=7", mountFlags{allowOther: true, defaultPerms: true, allowNonEmpty: true, poll: 2 * time.Second, version: "7"}, ""},
		{"nonempty,log_file=/var/log/w.log,debug", mountFlags{allowNonEmpty: true, logFile: "/var/log/w.log", debug: true}, ""},
		{"ro,s3_endpoint=http://10.0.0.5:9000,s3_region=eu-west-1,s3_path_style,s3_cache_size=20G", mountFlags{readOnly: true, s3Endpoint: "http://10.0.0.5:9000", s3Region: "eu-west-1", s3PathStyle: true, s3CacheSize: "20G"}, ""},
		{"ro,file_copies=4G", mountFlags{readOnly: true, fileCopies: "4G"}, ""},
		{"base_memory=16G", mountFlags{baseMemory: "16G"}, ""},
		{"keep_last=3,keep_every=100", mountFlags{keepLast: 3, keepEvery: 100}, ""},
		{"log_level=debug,log_format=json,log_file=/var/log/w.log", mountFlags{logLevel: "debug", logFormat: "json", logFile: "/var/log/w.log"}, ""},
		{"keep_last=three", mountFlags{}, "keep_last=three"},
		{"ro,metrics_addr=127.0.0.1:9464", mountFlags{readOnly: true, metricsAddr: "127.0.0.1:9464"}, ""},
		{"keep_every=-1", mountFlags{}, "keep_every=-1"},
		{"ro,alow_other", mountFlags{}, "alow_other: unknown mount option"},
		{"poll=fast", mountFlags{}, "poll=fast"},
		{"version=", mountFlags{}, "unknown mount option"},
	} {
		var got mountFlags
		err := applyMountOptions(&got, tc.opts)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want one containing %q", tc.opts, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.opts, got, err, tc.want)
		}
	}
}

func FuzzApplyMountOptions(f *testing.F) {
	f.Add("ro,allow_other,version=latest,poll=1s")
	f.Add("defaults,x-systemd.automount,,=")
	f.Fuzz(func(t *testing.T, s string) {
		var mf mountFlags
		_ = applyMountOptions(&mf, s)
	})
}

func TestFileCopyBytes(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"", 0, false}, {"0", -1, false}, {"4G", 4 << 30, false}, {"512M", 512 << 20, false}, {"lots", 0, true},
	} {
		got, err := fileCopyBytes(c.in)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("fileCopyBytes(%q) = %d, %v; want %d (error %v)", c.in, got, err, c.want, c.wantErr)
		}
	}
}

func TestBaseMemoryBytes(t *testing.T) {
	for _, c := range []struct {
		in       string
		readOnly bool
		ram      int64
		want     int64
		wantErr  bool
	}{
		{"", false, 64 << 30, 4 << 30, false}, // a sixteenth
		{"", false, 1 << 40, 8 << 30, false},  // at most 8 GiB
		{"", false, 0, 0, false},              // RAM not known: off
		{"0", false, 64 << 30, 0, false},      // off
		{"20G", false, 64 << 30, 20 << 30, false},
		{"20G", true, 64 << 30, 0, false}, // a reader writes no version
		{"lots", false, 64 << 30, 0, true},
	} {
		got, err := baseMemoryBytes(c.in, c.readOnly, c.ram)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("baseMemoryBytes(%q, %v, %d) = %d, %v; want %d (error %v)", c.in, c.readOnly, c.ram, got, err, c.want, c.wantErr)
		}
	}
	if memTotal() <= 0 {
		t.Log("no /proc/meminfo here: the default is off")
	}
}
