package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// mountFlags are the settings of `weightfs mount` that -o can also give.
type mountFlags struct {
	readOnly, allowOther, defaultPerms, allowNonEmpty, debug bool
	version, cacheDir                                        string
	logLevel, logFormat, logFile                             string
	poll                                                     time.Duration
	// The S3 settings of an s3:// store (the --s3-* flags), for fstab lines: credentials
	// are never options (docs/s3.md).
	s3Endpoint, s3Region, s3CacheSize string
	s3PathStyle                       bool
	// Retention of a read-write mount (--keep-last, --keep-every, --keep-exact).
	keepLast, keepEvery int
	keepExact           bool
	// metricsAddr is where /metrics is served (--metrics-addr; "": off).
	metricsAddr string
	// fileCopies bounds a reader's checked copies of older versions' files (--file-copies).
	fileCopies string
	// baseMemory bounds the writer's base in memory (--base-memory).
	baseMemory string
}

// optList is a repeatable -o flag: each value is a comma-separated option string.
type optList []string

func (o *optList) String() string     { return strings.Join(*o, ",") }
func (o *optList) Set(s string) error { *o = append(*o, s); return nil }

// fstabOnly are the words mount(8) and fstab use that mean nothing to the daemon: mount(8)
// and systemd act on them (auto, nofail, _netdev, user) before the helper runs, or they are
// the defaults weightfs has anyway (rw; suid/dev/exec and atime variants: a weightfs mount is
// always nosuid,nodev and has no access times).
var fstabOnly = map[string]bool{
	"defaults": true, "auto": true, "noauto": true, "nofail": true, "_netdev": true,
	"user": true, "users": true, "nouser": true, "owner": true, "group": true, "rw": true,
	"suid": true, "nosuid": true, "dev": true, "nodev": true, "exec": true, "noexec": true,
	"atime": true, "noatime": true, "relatime": true, "strictatime": true, "nodiratime": true,
	"async": true, "sync": true, "silent": true, "loud": true,
}

// applyMountOptions applies a FUSE-style option string (`ro,allow_other,version=latest`) on
// top of the flags. fstab-only words and x-* options (x-systemd.automount, ...) are accepted
// and ignored; anything else unknown is an error, so a typo does not mount with defaults.
func applyMountOptions(mf *mountFlags, s string) error {
	for _, opt := range strings.Split(s, ",") {
		opt = strings.TrimSpace(opt)
		key, val, hasVal := strings.Cut(opt, "=")
		switch {
		case opt == "" || fstabOnly[opt] || strings.HasPrefix(opt, "x-") || key == "comment":
		case opt == "ro":
			mf.readOnly = true
		case opt == "allow_other":
			mf.allowOther = true
		case opt == "default_permissions":
			mf.defaultPerms = true
		case opt == "allow_non_empty" || opt == "nonempty":
			mf.allowNonEmpty = true
		case opt == "debug":
			mf.debug = true
		case opt == "s3_path_style":
			mf.s3PathStyle = true
		case opt == "keep_exact":
			mf.keepExact = true
		case hasVal && val != "" && mf.stringOption(key) != nil:
			*mf.stringOption(key) = val
		case hasVal && val != "" && mf.intOption(key) != nil:
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return fmt.Errorf("-o %s: want a whole number, 0 or more", opt)
			}
			*mf.intOption(key) = n
		case hasVal && val != "" && key == "poll":
			d, err := time.ParseDuration(val)
			if err != nil || d <= 0 {
				return fmt.Errorf("-o poll=%s: want a positive duration such as 500ms or 2s", val)
			}
			mf.poll = d
		default:
			return fmt.Errorf("-o %s: unknown mount option (known: ro, allow_other, default_permissions, allow_non_empty, debug, version=N|latest, cache_dir=DIR, poll=DURATION, log_level=LEVEL, log_format=text|json, log_file=FILE, keep_last=N, keep_every=K, keep_exact, metrics_addr=HOST:PORT, file_copies=SIZE, base_memory=SIZE, s3_endpoint=URL, s3_region=NAME, s3_path_style, s3_cache_size=SIZE, and fstab's defaults, noauto, nofail, _netdev, user, rw, x-*)", opt)
		}
	}
	return nil
}

// stringOption is the field a -o KEY=VALUE option with a string value sets, or nil.
func (mf *mountFlags) stringOption(key string) *string {
	return map[string]*string{
		"version": &mf.version, "cache_dir": &mf.cacheDir,
		"log_level": &mf.logLevel, "log_format": &mf.logFormat, "log_file": &mf.logFile,
		"s3_endpoint": &mf.s3Endpoint, "s3_region": &mf.s3Region, "s3_cache_size": &mf.s3CacheSize,
		"file_copies":  &mf.fileCopies,
		"base_memory":  &mf.baseMemory,
		"metrics_addr": &mf.metricsAddr,
	}[key]
}

// intOption is the field a -o KEY=N option sets, or nil.
func (mf *mountFlags) intOption(key string) *int {
	return map[string]*int{"keep_last": &mf.keepLast, "keep_every": &mf.keepEvery}[key]
}

// sdNotify sends a state ("READY=1", "STOPPING=1") to the service manager, as sd_notify(3)
// does: one datagram to the unix socket named by $NOTIFY_SOCKET ('@' for the abstract
// namespace). Without the variable it does nothing: the daemon was not started by systemd
// (or by mount.weightfs, which listens the same way).
func sdNotify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	if name[0] != '/' && name[0] != '@' {
		return fmt.Errorf("NOTIFY_SOCKET=%s: only unix socket paths are supported", name)
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify %s: %w", name, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify %s: %w", name, err)
	}
	return nil
}

// fileCopyBytes is store.Options.FileCopyBytes for --file-copies: "" the store's default,
// "0" none (the store's negative), else a size.
func fileCopyBytes(v string) (int64, error) {
	switch strings.TrimSpace(v) {
	case "":
		return 0, nil
	case "0":
		return -1, nil
	}
	n, err := parseSize(v)
	if err != nil {
		return 0, fmt.Errorf("--file-copies: %w (0: none)", err)
	}
	return n, nil
}

// baseMemoryBytes is store.Options.BaseMemory for --base-memory: "" the default
// (defaultBaseMemory of memTotal, the node's RAM), "0" off, else a size. A read-only mount
// writes no version: off.
func baseMemoryBytes(v string, readOnly bool, memTotal int64) (int64, error) {
	if readOnly {
		return 0, nil
	}
	switch strings.TrimSpace(v) {
	case "":
		return defaultBaseMemory(memTotal), nil
	case "0":
		return 0, nil
	}
	n, err := parseSize(v)
	if err != nil {
		return 0, fmt.Errorf("--base-memory: %w (0: off)", err)
	}
	return n, nil
}

// defaultBaseMemory is the base in memory a writer keeps unless told: a sixteenth of the
// node's RAM, at most 8 GiB (none when the RAM is not known). The trainer needs the node's
// memory, and the process may hold up to about twice the budget while a version is written
// (the previous version's tensors until they are used, the new one's as they come, and what
// Go's collector has not yet returned): so at most an eighth of the RAM. 8 GiB keeps a model
// of 4B parameters in bf16; larger ones name their budget (docs/operations.md).
func defaultBaseMemory(memTotal int64) int64 {
	return min(memTotal/16, 8<<30)
}

// memTotal is the node's RAM (MemTotal of /proc/meminfo), 0 when it cannot be read.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil || kb < 0 {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
