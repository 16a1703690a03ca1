package s3

import (
	"fmt"
	"strings"
)

// Scheme starts the address of a store kept in an S3 bucket: s3://bucket/prefix.
const Scheme = "s3://"

// IsURL reports whether a STORE argument names an S3 store rather than a local directory.
func IsURL(s string) bool { return strings.HasPrefix(s, Scheme) }

// Location is where a store lives in S3: a bucket and a key prefix (no leading or trailing
// slash; empty for the bucket's top). Every key of the store is Prefix + "/" + its path in
// the local layout (docs/format.md (Part I) §1).
type Location struct {
	Bucket string
	Prefix string
}

// ParseURL parses s3://bucket or s3://bucket/prefix. The bucket must follow S3's naming
// rules (3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a
// letter or digit); the prefix must be a clean relative key path (no empty, "." or ".."
// segments, no backslashes or control characters). One trailing slash is allowed.
func ParseURL(s string) (Location, error) {
	if !IsURL(s) {
		return Location{}, fmt.Errorf("%q is not an S3 store address (want s3://bucket/prefix)", s)
	}
	rest := strings.TrimSuffix(strings.TrimPrefix(s, Scheme), "/")
	bucket, prefix, _ := strings.Cut(rest, "/")
	if err := checkBucketName(bucket); err != nil {
		return Location{}, fmt.Errorf("store address %q: %w", s, err)
	}
	if prefix != "" {
		if err := checkKeyPrefix(prefix); err != nil {
			return Location{}, fmt.Errorf("store address %q: %w", s, err)
		}
	}
	return Location{Bucket: bucket, Prefix: prefix}, nil
}

// String is the canonical s3:// address.
func (l Location) String() string {
	if l.Prefix == "" {
		return Scheme + l.Bucket
	}
	return Scheme + l.Bucket + "/" + l.Prefix
}

// key is the object key of rel, a slash-separated path of the store's layout.
func (l Location) key(rel string) string {
	if l.Prefix == "" {
		return rel
	}
	return l.Prefix + "/" + rel
}

// rel is the inverse of key: the store path of an object key; ok is false for keys outside
// the prefix.
func (l Location) rel(key string) (string, bool) {
	if l.Prefix == "" {
		return key, true
	}
	return strings.CutPrefix(key, l.Prefix+"/")
}

func checkBucketName(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && c != '.' && c != '-' {
			return fmt.Errorf("bucket name %q: only lowercase letters, digits, '.' and '-' are allowed", b)
		}
		if !alnum && (i == 0 || i == len(b)-1) {
			return fmt.Errorf("bucket name %q must start and end with a letter or digit", b)
		}
	}
	if strings.Contains(b, "..") {
		return fmt.Errorf("bucket name %q must not contain \"..\"", b)
	}
	return nil
}

func checkKeyPrefix(p string) error {
	if len(p) > 512 {
		return fmt.Errorf("prefix of %d bytes is too long (at most 512)", len(p))
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("prefix %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '\\' || r == 0xfffd {
			return fmt.Errorf("prefix %q holds a control character, a backslash or invalid UTF-8", p)
		}
	}
	return nil
}
