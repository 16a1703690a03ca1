package s3

import (
	"strings"
	"testing"
	"time"
)

func TestParseS3URL(t *testing.T) {
	tests := []struct {
		in      string
		bucket  string
		prefix  string
		wantErr string
	}{
		{"s3://bucket", "bucket", "", ""},
		{"s3://bucket/", "bucket", "", ""},
		{"s3://my.bucket-1/runs/exp7", "my.bucket-1", "runs/exp7", ""},
		{"s3://bucket/runs/exp7/", "bucket", "runs/exp7", ""},
		{"/local/dir", "", "", "not an S3 store address"},
		{"s3://", "", "", "3 to 63"},
		{"s3://ab", "", "", "3 to 63"},
		{"s3://Bucket", "", "", "lowercase"},
		{"s3://-bucket", "", "", "start and end"},
		{"s3://bucket-", "", "", "start and end"},
		{"s3://buck..et", "", "", `".."`},
		{"s3://bucket//x", "", "", "empty"},
		{"s3://bucket/a/../b", "", "", "segment"},
		{"s3://bucket/./b", "", "", "segment"},
		{"s3://bucket/a\\b", "", "", "backslash"},
		{"s3://bucket/a\x01b", "", "", "control"},
		{"s3://" + strings.Repeat("b", 64), "", "", "3 to 63"},
	}
	for _, tt := range tests {
		loc, err := ParseURL(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseURL(%q) = %+v, %v; want an error with %q", tt.in, loc, err, tt.wantErr)
			}
			continue
		}
		if err != nil || loc.Bucket != tt.bucket || loc.Prefix != tt.prefix {
			t.Errorf("ParseURL(%q) = %+v, %v; want %s %q", tt.in, loc, err, tt.bucket, tt.prefix)
		}
	}
}

func TestS3LocationKeys(t *testing.T) {
	for _, loc := range []Location{{"bucket", ""}, {"bucket", "a/b"}} {
		k := loc.key("versions/v000001")
		if rel, ok := loc.rel(k); !ok || rel != "versions/v000001" {
			t.Errorf("%+v: key %q, rel %q %v", loc, k, rel, ok)
		}
		if again, err := ParseURL(loc.String()); err != nil || again != loc {
			t.Errorf("%+v: String %q parses to %+v, %v", loc, loc.String(), again, err)
		}
	}
	if _, ok := (Location{"bucket", "a"}).rel("ab/c"); ok {
		t.Error("a key outside the prefix was accepted")
	}
}

func FuzzParseS3URL(f *testing.F) {
	for _, s := range []string{"s3://bucket", "s3://bucket/a/b", "s3://a.b-c/x/", "s3://x//", "s3://bucket/\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		loc, err := ParseURL(s)
		if err != nil {
			return
		}
		again, err := ParseURL(loc.String())
		if err != nil || again != loc {
			t.Fatalf("%q parses to %+v, whose String %q parses to %+v, %v", s, loc, loc.String(), again, err)
		}
		if strings.HasPrefix(loc.Prefix, "/") || strings.HasSuffix(loc.Prefix, "/") || strings.Contains(loc.Prefix, "//") {
			t.Fatalf("%q: unclean prefix %q", s, loc.Prefix)
		}
	})
}

func TestS3OptionsResolve(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	tests := []struct {
		name    string
		opts    Config
		env     func(string) string
		check   func(settings) bool
		wantErr string
	}{
		{"defaults", Config{}, env(), func(s settings) bool {
			return s.host == "s3.amazonaws.com" && s.secure && s.region == "us-east-1" && s.partSize == DefaultPartSize &&
				s.concurrency == DefaultConcurrency && s.leaseTTL == DefaultLeaseTTL && s.retryFor == DefaultRetryFor
		}, ""},
		{"env endpoint and region", Config{}, env("AWS_ENDPOINT_URL", "http://127.0.0.1:9000", "AWS_REGION", "eu-west-1"), func(s settings) bool {
			return s.host == "127.0.0.1:9000" && !s.secure && s.region == "eu-west-1"
		}, ""},
		{"S3 endpoint beats the general one", Config{}, env("AWS_ENDPOINT_URL", "http://a:1", "AWS_ENDPOINT_URL_S3", "http://b:2"), func(s settings) bool {
			return s.host == "b:2"
		}, ""},
		{"option beats env", Config{Endpoint: "https://c:3", Region: "r1"}, env("AWS_ENDPOINT_URL", "http://a:1", "AWS_REGION", "r2"), func(s settings) bool {
			return s.host == "c:3" && s.secure && s.region == "r1"
		}, ""},
		{"bare host is https", Config{Endpoint: "minio.local:9000"}, env(), func(s settings) bool {
			return s.host == "minio.local:9000" && s.secure
		}, ""},
		{"path style from env", Config{}, env("AWS_S3_FORCE_PATH_STYLE", "true"), func(s settings) bool { return s.pathStyle }, ""},
		{"bad path style", Config{}, env("AWS_S3_FORCE_PATH_STYLE", "maybe"), nil, "not a boolean"},
		{"endpoint with a path", Config{Endpoint: "http://h:1/base"}, env(), nil, "only scheme"},
		{"endpoint scheme", Config{Endpoint: "ftp://h"}, env(), nil, "scheme"},
		{"small part", Config{PartSize: 1 << 20}, env(), nil, "part size"},
		{"negative cache", Config{ObjectCacheBytes: -1}, env(), nil, "negative"},
		{"short lease", Config{LeaseTTL: time.Millisecond}, env(), nil, "lease"},
		{"too many transfers", Config{Concurrency: 1000}, env(), nil, "concurrency"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.opts.resolve(tt.env)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("resolve: %+v, %v; want an error with %q", s, err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.check(s) {
				t.Fatalf("resolve: %+v, %v", s, err)
			}
		})
	}
}
