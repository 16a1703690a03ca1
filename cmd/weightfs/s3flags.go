package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weightfs/weightfs/store/location"
)

// storeFlags are the flags every command that takes STORE has: where an s3:// store's service
// is, and this process's local state. Credentials are never flags: they come from where every
// AWS tool finds them (environment, shared files and AWS_PROFILE, instance or pod role; see
// docs/s3.md).
type storeFlags struct {
	endpoint  *string
	region    *string
	pathStyle *bool
	cacheSize *string
	leaseTTL  *time.Duration
	cacheDir  *string // nil when the command defines --cache-dir itself
}

// addStoreFlags adds the store flags to fs; withCacheDir adds --cache-dir too.
func addStoreFlags(fs *flag.FlagSet, withCacheDir bool) *storeFlags {
	f := &storeFlags{
		endpoint:  fs.String("s3-endpoint", "", "S3 service of an s3://bucket/prefix STORE, http(s)://host[:port] (default $AWS_ENDPOINT_URL, else AWS)"),
		region:    fs.String("s3-region", "", "region of the bucket (default $AWS_REGION, else us-east-1)"),
		pathStyle: fs.Bool("s3-path-style", false, "path-style S3 requests (host/bucket/key), as most S3-compatible servers want"),
		cacheSize: fs.String("s3-cache-size", "", "size limit of the local cache of S3 objects, e.g. 20G (default 8G; LRU)"),
		leaseTTL:  fs.Duration("s3-lease-ttl", 0, "writer lease lifetime on S3: a dead writer's lease expires after it (default 30s)"),
	}
	if withCacheDir {
		f.cacheDir = fs.String("cache-dir", "", "this process's local state: index, materialized copy, S3 object cache (default: STORE/cache for a local writer, a directory per store for an S3 writer, a per-process directory for readers)")
	}
	return f
}

// apply sets the options the flags give.
func (f *storeFlags) apply(opts *location.Options) error {
	if f == nil {
		return nil
	}
	opts.S3.Endpoint = *f.endpoint
	opts.S3.Region = *f.region
	opts.S3.PathStyle = *f.pathStyle
	opts.S3.LeaseTTL = *f.leaseTTL
	if *f.cacheSize != "" {
		n, err := parseSize(*f.cacheSize)
		if err != nil {
			return usagef("--s3-cache-size: %v", err)
		}
		opts.S3.ObjectCacheBytes = n
	}
	if f.cacheDir != nil && *f.cacheDir != "" {
		opts.CacheDir = *f.cacheDir
	}
	return nil
}

// parseSize accepts a byte count with an optional K, M, G or T suffix (powers of 1024; a
// trailing "B" or "iB" is allowed).
func parseSize(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B"), "I")
	shift := 0
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	bytes := n * float64(int64(1)<<shift)
	// !(bytes >= 1) refuses NaN too.
	if err != nil || !(bytes >= 1) || bytes >= 1<<62 {
		return 0, fmt.Errorf("%q is not a size (e.g. 512M, 20G)", s)
	}
	return int64(bytes), nil
}
