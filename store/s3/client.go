package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
)

// client is the store's view of an S3 bucket: whole-object and ranged GETs, PUTs (with
// the conditional headers the lease and the manifests need), listings and deletes, each
// retried with backoff on transient errors for up to retryFor. Every request goes through
// minio-go; this type adds the retry policy, the error classes and the traffic counters.
type client struct {
	mc       *minio.Client
	loc      Location
	set      settings
	stats    *counters
	log      *slog.Logger
	sleep    func(ctx context.Context, d time.Duration) error // tests shorten it
	downMu   sync.Mutex
	downLogd bool // "unreachable" was logged and "reachable again" was not yet
}

func newClient(loc Location, set settings, log *slog.Logger) (*client, error) {
	base, err := minio.DefaultTransport(set.secure)
	if err != nil {
		return nil, fmt.Errorf("S3 transport: %w", err)
	}
	// A server that accepts the connection and then says nothing must not hang a read:
	// the retry loop decides how long to keep trying.
	base.ResponseHeaderTimeout = 30 * time.Second
	stats := &counters{}
	lookup := minio.BucketLookupAuto
	if set.pathStyle {
		lookup = minio.BucketLookupPath
	}
	mc, err := minio.New(set.host, &minio.Options{
		Creds:        credentialChain(set.region, os.Getenv, log),
		Secure:       set.secure,
		Region:       set.region,
		BucketLookup: lookup,
		Transport:    countingTransport{base: base, c: stats},
		// One attempt per call: retries are ours (client.retry), so that their policy,
		// their logging and their counting are in one place.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 client for %s: %w", set.endpointURL(), err)
	}
	return &client{mc: mc, loc: loc, set: set, stats: stats, log: log, sleep: sleepCtx}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errClass sorts the errors of S3 requests by what the caller should do about them.
type errClass int

const (
	classOK           errClass = iota
	classNotFound              // 404: the key (or the bucket) is not there
	classPrecondition          // 412: a conditional request's condition does not hold
	classTransient             // retry: the network, a timeout, 5xx, 429, a conflict of conditional writes
	classPermanent             // retrying will not help: credentials, permissions, bad requests
)

// classify tells an error of minio-go apart.
func classify(err error) errClass {
	if err == nil {
		return classOK
	}
	if errors.Is(err, context.Canceled) {
		return classPermanent
	}
	var er minio.ErrorResponse
	if !errors.As(err, &er) || er.StatusCode == 0 && er.Code == "" {
		// Not an answer of the server: a refused or reset connection, a timeout, a body
		// cut short. The server may be back soon.
		return classTransient
	}
	switch er.Code {
	case "NoSuchKey", "NoSuchBucket", "NotFound":
		return classNotFound
	case "PreconditionFailed":
		return classPrecondition
	case "ConditionalRequestConflict", "SlowDown", "InternalError", "RequestTimeout",
		"ServiceUnavailable", "RequestTimeTooSkewed", "OperationAborted":
		return classTransient
	}
	switch {
	case er.StatusCode == http.StatusNotFound:
		return classNotFound
	case er.StatusCode == http.StatusPreconditionFailed:
		return classPrecondition
	case er.StatusCode == http.StatusConflict, er.StatusCode == http.StatusTooManyRequests,
		er.StatusCode == http.StatusRequestTimeout, er.StatusCode >= 500:
		return classTransient
	}
	return classPermanent
}

// requestError is a failed S3 request. It carries the cause's text but unwraps only to
// fs.ErrNotExist (a missing key): a network errno such as ECONNREFUSED must not reach the
// FUSE layer, where an errno in the chain would be passed to the kernel instead of EIO.
type requestError struct {
	op    string // "GET s3://bucket/key"
	class errClass
	msg   string
	tries int
	// status is the HTTP status of the server's answer, 0 if there was none.
	status int
}

func (e *requestError) Error() string {
	s := e.op + ": " + e.msg
	if e.tries > 1 {
		s += fmt.Sprintf(" (gave up after %d attempts)", e.tries)
	}
	return s
}

func (e *requestError) Unwrap() error {
	if e.class == classNotFound {
		return fs.ErrNotExist
	}
	return nil
}

// isPrecondition reports whether err is a failed condition of a conditional request.
func isPrecondition(err error) bool {
	var e *requestError
	return errors.As(err, &e) && e.class == classPrecondition
}

// backoff is the pause before retry number attempt (0 = the first retry): 100 ms doubling
// up to 2 s, each with up to half of it taken off at random so that clients spread out.
func backoff(attempt int) time.Duration {
	d := 2 * time.Second
	if attempt < 5 {
		d = 100 * time.Millisecond << attempt
	}
	return d - rand.N(d/2+1)
}

// retry runs op until it succeeds, fails with a non-transient error, or retryFor has passed
// since the first attempt. what names the request in errors and logs.
func (c *client) retry(ctx context.Context, what string, op func(ctx context.Context) error) error {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		err := op(ctx)
		var local *localError
		if errors.As(err, &local) {
			return local.err // a local disk error: not S3's, not retried
		}
		class := classify(err)
		if class == classOK {
			c.reachable()
			return nil
		}
		if class != classTransient || ctx.Err() != nil || time.Since(start) >= c.set.retryFor {
			if class == classTransient {
				c.stats.add(&c.stats.failures, 1)
			}
			if class == classNotFound || class == classPrecondition {
				c.reachable()
			}
			var er minio.ErrorResponse
			errors.As(err, &er)
			return &requestError{op: what, class: class, msg: errorText(err), tries: attempt + 1, status: er.StatusCode}
		}
		c.unreachable(what, err)
		c.stats.add(&c.stats.retries, 1)
		if err := c.sleep(ctx, backoff(attempt)); err != nil {
			return &requestError{op: what, class: classPermanent, msg: err.Error(), tries: attempt + 1}
		}
	}
}

// errorText is the message of a minio-go error, with the S3 error code when there is one.
func errorText(err error) string {
	var er minio.ErrorResponse
	if errors.As(err, &er) && er.Code != "" {
		msg := fmt.Sprintf("%s (%s, HTTP %d)", er.Message, er.Code, er.StatusCode)
		switch er.Code {
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AuthorizationHeaderMalformed":
			msg += "; check the credentials (environment, shared files and AWS_PROFILE, or instance or pod role: see docs/s3.md) and the region"
		}
		return msg
	}
	return err.Error()
}

// unreachable logs the first transient failure after a success; reachable logs the recovery.
func (c *client) unreachable(what string, err error) {
	c.downMu.Lock()
	defer c.downMu.Unlock()
	if !c.downLogd {
		c.downLogd = true
		c.log.Warn(fmt.Sprintf("s3: %s: %s; retrying with backoff for up to %s", what, errorText(err), c.set.retryFor))
	}
}

func (c *client) reachable() {
	c.downMu.Lock()
	defer c.downMu.Unlock()
	if c.downLogd {
		c.downLogd = false
		c.log.Info(fmt.Sprintf("s3: %s is reachable again", c.set.endpointURL()))
	}
}

func (c *client) name(key string) string { return Scheme + c.loc.Bucket + "/" + key }

// getBytes reads a whole small object (a manifest, the lease, the format file), counting
// its bytes in *counter, and returns them with the object's ETag.
func (c *client) getBytes(ctx context.Context, key string, counter *int64) (data []byte, etag string, err error) {
	err = c.retry(ctx, "GET "+c.name(key), func(ctx context.Context) error {
		obj, info, _, err := c.getOne(ctx, key, minio.GetObjectOptions{})
		if err != nil {
			return err
		}
		defer obj.Close()
		if data, err = io.ReadAll(obj); err != nil {
			return err
		}
		if int64(len(data)) != info.Size {
			return fmt.Errorf("read %d of %d bytes: %w", len(data), info.Size, io.ErrUnexpectedEOF)
		}
		etag = info.ETag
		return nil
	})
	if err == nil && counter != nil {
		c.stats.add(counter, int64(len(data)))
	}
	return data, etag, err
}

// stat returns an object's size and ETag.
func (c *client) stat(ctx context.Context, key string) (size int64, etag string, err error) {
	err = c.retry(ctx, "HEAD "+c.name(key), func(ctx context.Context) error {
		info, err := c.mc.StatObject(ctx, c.loc.Bucket, key, minio.StatObjectOptions{})
		if err != nil {
			return err
		}
		size, etag = info.Size, info.ETag
		return nil
	})
	return size, etag, err
}

// putCond is the condition of a conditional PUT.
type putCond struct {
	ifNoneMatch bool   // create only: the key must not exist
	ifMatch     string // replace only the object with this ETag
}

// putBytes stores a small object, optionally under a condition, and returns its ETag.
func (c *client) putBytes(ctx context.Context, key string, data []byte, cond putCond) (string, error) {
	var etag string
	err := c.retry(ctx, "PUT "+c.name(key), func(ctx context.Context) error {
		opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true}
		if cond.ifNoneMatch {
			opts.SetMatchETagExcept("*")
		}
		if cond.ifMatch != "" {
			opts.SetMatchETag(cond.ifMatch)
		}
		info, err := c.mc.PutObject(ctx, c.loc.Bucket, key, bytes.NewReader(data), int64(len(data)), opts)
		etag = info.ETag
		return err
	})
	if err == nil {
		c.stats.add(&c.stats.uploads, 1)
		c.stats.add(&c.stats.uploadBytes, int64(len(data)))
	}
	return etag, err
}

// putFile uploads size bytes of f as key: one PUT up to the part size, else a multipart
// upload whose parts are read from f at their offsets and sent in parallel.
func (c *client) putFile(ctx context.Context, key string, f *os.File, size int64) error {
	return c.putFileParts(ctx, key, f, size, c.set.partSize)
}

// putFileParts is putFile with parts of part bytes.
func (c *client) putFileParts(ctx context.Context, key string, f *os.File, size, part int64) error {
	err := c.retry(ctx, "PUT "+c.name(key), func(ctx context.Context) error {
		opts := minio.PutObjectOptions{
			ContentType: "application/octet-stream",
			PartSize:    uint64(part),
			NumThreads:  uint(min(4, c.set.concurrency)),
		}
		// A SectionReader is an io.ReaderAt as well: minio-go then reads the parts at their
		// offsets instead of buffering them.
		_, err := c.mc.PutObject(ctx, c.loc.Bucket, key, io.NewSectionReader(f, 0, size), size, opts)
		return err
	})
	if err == nil {
		c.stats.add(&c.stats.uploads, 1)
		c.stats.add(&c.stats.uploadBytes, size)
		if size > part {
			c.stats.add(&c.stats.multipartUploads, 1)
		}
	}
	return err
}

// remove deletes an object; a missing one is not an error.
func (c *client) remove(ctx context.Context, key string) error {
	err := c.retry(ctx, "DELETE "+c.name(key), func(ctx context.Context) error {
		return c.mc.RemoveObject(ctx, c.loc.Bucket, key, minio.RemoveObjectOptions{})
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// list calls fn for every object under the store-relative directory dir ("versions/"), in
// key order. A listing cut short by an error is retried from the last key seen; an error of
// fn ends it and is returned as it is.
func (c *client) list(ctx context.Context, dir string, fn func(rel string, size int64) error) error {
	prefix := c.loc.key(dir)
	after := ""
	var fnErr error
	err := c.retry(ctx, "LIST "+c.name(prefix), func(ctx context.Context) error {
		lctx, cancel := context.WithCancel(ctx)
		defer cancel() // stops minio-go's listing goroutine when we leave early
		for info := range c.mc.ListObjects(lctx, c.loc.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true, StartAfter: after}) {
			if info.Err != nil {
				return info.Err
			}
			if rel, ok := c.loc.rel(info.Key); ok {
				if fnErr = fn(rel, info.Size); fnErr != nil {
					return nil
				}
			}
			after = info.Key
		}
		return nil
	})
	if fnErr != nil {
		return fnErr
	}
	return err
}

// bucketExists reports whether the bucket is there (and reachable with these credentials).
func (c *client) bucketExists(ctx context.Context) (bool, error) {
	var ok bool
	err := c.retry(ctx, "HEAD "+Scheme+c.loc.Bucket, func(ctx context.Context) error {
		var err error
		ok, err = c.mc.BucketExists(ctx, c.loc.Bucket)
		return err
	})
	return ok, err
}

// makeBucket creates the bucket in the client's region.
func (c *client) makeBucket(ctx context.Context) error {
	return c.retry(ctx, "CREATE BUCKET "+Scheme+c.loc.Bucket, func(ctx context.Context) error {
		err := c.mc.MakeBucket(ctx, c.loc.Bucket, minio.MakeBucketOptions{Region: c.set.region})
		var er minio.ErrorResponse
		if errors.As(err, &er) && (er.Code == "BucketAlreadyOwnedByYou" || er.Code == "BucketAlreadyExists") {
			return nil
		}
		return err
	})
}

// describe names the store and its endpoint, for messages.
func (c *client) describe() string {
	return fmt.Sprintf("%s at %s", c.loc, strings.TrimSuffix(c.set.endpointURL(), "/"))
}
