package s3

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config configures a store at s3://bucket/prefix. Zero fields take the standard AWS
// environment variables where there is one, then the defaults below. Credentials are never
// options: they come from where every AWS tool finds them (credentialChain: the environment,
// web identity, the shared files and AWS_PROFILE, a container or instance role).
type Config struct {
	// Endpoint is the S3 service, "https://host[:port]" or "http://host[:port]" (no path).
	// Empty: AWS_ENDPOINT_URL_S3, then AWS_ENDPOINT_URL, then https://s3.amazonaws.com.
	Endpoint string
	// Region is the bucket's region. Empty: AWS_REGION, then AWS_DEFAULT_REGION, then
	// us-east-1.
	Region string
	// PathStyle forces path-style requests (http://host/bucket/key), which most S3-compatible
	// servers want. Off: the client picks (virtual-host style for AWS, path style otherwise);
	// AWS_S3_FORCE_PATH_STYLE=true turns it on too.
	PathStyle bool

	// ObjectCacheBytes bounds the local disk cache of downloaded objects (LRU; 0:
	// DefaultObjectCacheBytes). Objects waiting for upload and the materialized copy are
	// not counted.
	ObjectCacheBytes int64
	// Concurrency bounds the uploads and the downloads in flight, each (0:
	// DefaultConcurrency).
	Concurrency int
	// PartSize is the multipart part size: larger objects are uploaded in parts and
	// downloaded by parallel ranged reads (0: DefaultPartSize; at least 5 MiB).
	PartSize int64
	// RetryFor is how long a transient error (a refused connection, a timeout, HTTP 5xx or
	// 429) is retried with backoff before the operation fails (0: DefaultRetryFor).
	RetryFor time.Duration
	// LeaseTTL is how long the writer's lease lasts without renewal; it is renewed every
	// third of it, and a writer that died is replaced automatically once it expired
	// (0: DefaultLeaseTTL).
	LeaseTTL time.Duration
}

// Defaults of Config.
const (
	DefaultObjectCacheBytes = 8 << 30
	DefaultConcurrency      = 8
	DefaultPartSize         = 16 << 20
	MinPartSize             = 5 << 20
	DefaultRetryFor         = 30 * time.Second
	DefaultLeaseTTL         = 30 * time.Second
	// DefaultPollInterval is how often a read-only mount of an S3 store looks for new
	// versions: each look is one GET of the change hint with If-None-Match (hint.go),
	// answered 304 with no body while nothing changed; the mount lists versions/ only when
	// the hint moved, and at least every store.PollListEvery (docs/s3.md, "Readers").
	DefaultPollInterval = 250 * time.Millisecond
)

// settings are Config resolved against the environment and the defaults.
type settings struct {
	host      string // host[:port]
	secure    bool
	region    string
	pathStyle bool

	cacheBytes  int64
	concurrency int
	partSize    int64
	retryFor    time.Duration
	leaseTTL    time.Duration
}

// resolve fills the zero fields of o from getenv and the defaults and checks the result.
func (o Config) resolve(getenv func(string) string) (settings, error) {
	st := settings{
		region:     firstNonEmpty(o.Region, getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"), "us-east-1"),
		cacheBytes: o.ObjectCacheBytes, concurrency: o.Concurrency, partSize: o.PartSize,
		retryFor: o.RetryFor, leaseTTL: o.LeaseTTL, pathStyle: o.PathStyle,
	}
	endpoint := firstNonEmpty(o.Endpoint, getenv("AWS_ENDPOINT_URL_S3"), getenv("AWS_ENDPOINT_URL"), "https://s3.amazonaws.com")
	var err error
	if st.host, st.secure, err = parseEndpoint(endpoint); err != nil {
		return settings{}, err
	}
	if v := getenv("AWS_S3_FORCE_PATH_STYLE"); v != "" && !st.pathStyle {
		if st.pathStyle, err = strconv.ParseBool(v); err != nil {
			return settings{}, fmt.Errorf("AWS_S3_FORCE_PATH_STYLE=%q is not a boolean", v)
		}
	}
	switch {
	case st.cacheBytes < 0:
		return settings{}, fmt.Errorf("S3 object cache size %d is negative", st.cacheBytes)
	case st.cacheBytes == 0:
		st.cacheBytes = DefaultObjectCacheBytes
	}
	switch {
	case st.concurrency < 0 || st.concurrency > 256:
		return settings{}, fmt.Errorf("S3 concurrency %d is not within 1..256", st.concurrency)
	case st.concurrency == 0:
		st.concurrency = DefaultConcurrency
	}
	switch {
	case st.partSize == 0:
		st.partSize = DefaultPartSize
	case st.partSize < MinPartSize || st.partSize > 5<<30:
		return settings{}, fmt.Errorf("S3 part size %d is not within 5 MiB..5 GiB", st.partSize)
	}
	if st.retryFor <= 0 {
		st.retryFor = DefaultRetryFor
	}
	switch {
	case st.leaseTTL == 0:
		st.leaseTTL = DefaultLeaseTTL
	case st.leaseTTL < time.Second:
		return settings{}, fmt.Errorf("lease TTL %s is shorter than a second", st.leaseTTL)
	}
	return st, nil
}

// parseEndpoint accepts "https://host[:port]", "http://host[:port]" or a bare
// "host[:port]" (https).
func parseEndpoint(e string) (host string, secure bool, err error) {
	if !strings.Contains(e, "://") {
		e = "https://" + e
	}
	u, err := url.Parse(e)
	if err != nil {
		return "", false, fmt.Errorf("S3 endpoint %q: %w", e, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("S3 endpoint %q: scheme must be http or https", e)
	case u.Host == "":
		return "", false, fmt.Errorf("S3 endpoint %q has no host", e)
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil:
		return "", false, fmt.Errorf("S3 endpoint %q: only scheme, host and port are allowed", e)
	}
	return u.Host, u.Scheme == "https", nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// endpointURL is the endpoint as a URL, for messages and the cache's origin record.
func (st settings) endpointURL() string {
	if st.secure {
		return "https://" + st.host
	}
	return "http://" + st.host
}
