package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
)

// The GETs of object content: ranges, first parts, whole objects. Each is one attempt
// except getRange, which retries; downloads (fetch.go) wrap the others in client.retry.

// getRange reads bytes [off, off+n) of an object whose ETag is etag (empty: any), counting
// them as object bytes.
func (c *client) getRange(ctx context.Context, key, etag string, off, n int64, dst io.WriterAt) error {
	err := c.retry(ctx, fmt.Sprintf("GET %s [%d, %d)", c.name(key), off, off+n), func(ctx context.Context) error {
		opts := minio.GetObjectOptions{}
		if err := opts.SetRange(off, off+n-1); err != nil {
			return err
		}
		if etag != "" {
			// The parts of one download must come from one version of the object (GC may
			// replace a delta by a whole copy of the same content).
			if err := opts.SetMatchETag(etag); err != nil {
				return err
			}
		}
		obj, err := c.mc.GetObject(ctx, c.loc.Bucket, key, opts)
		if err != nil {
			return err
		}
		defer obj.Close()
		got, err := io.Copy(io.NewOffsetWriter(dst, off), io.LimitReader(obj, n))
		if err != nil {
			return err
		}
		if got != n {
			return fmt.Errorf("range read %d of %d bytes: %w", got, n, io.ErrUnexpectedEOF)
		}
		return nil
	})
	if err == nil {
		c.stats.add(&c.stats.objectBytes, n)
	}
	return err
}

// getFirst asks for the first n bytes of the object at key (one attempt) and writes what
// comes into dst at offset 0. It returns the object's total size (from Content-Range; a
// server that ignores the range sends everything), its ETag and the bytes received.
func (c *client) getFirst(ctx context.Context, key string, n int64, dst io.WriterAt) (total int64, etag string, got int64, err error) {
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(0, n-1); err != nil {
		return 0, "", 0, err
	}
	obj, info, hdr, err := c.getOne(ctx, key, opts)
	if err != nil {
		return 0, "", 0, err
	}
	defer obj.Close()
	total = info.Size
	if cr := hdr.Get("Content-Range"); cr != "" {
		if total, err = parseContentRangeTotal(cr); err != nil {
			return 0, "", 0, err
		}
	}
	if got, err = io.Copy(io.NewOffsetWriter(dst, 0), obj); err != nil {
		return 0, "", 0, err
	}
	if got != info.Size || got > total {
		return 0, "", 0, fmt.Errorf("read %d of %d bytes: %w", got, info.Size, io.ErrUnexpectedEOF)
	}
	return total, info.ETag, got, nil
}

// getOne sends one GET of the object at key and returns its body, what its headers say of it
// and the headers. (minio-go's Client.GetObject asks with a HEAD first when the caller wants
// the object's size before its bytes: two requests where one does.)
func (c *client) getOne(ctx context.Context, key string, opts minio.GetObjectOptions) (io.ReadCloser, minio.ObjectInfo, http.Header, error) {
	return minio.Core{Client: c.mc}.GetObject(ctx, c.loc.Bucket, key, opts)
}

// parseContentRangeTotal returns the complete length of "bytes FIRST-LAST/TOTAL".
func parseContentRangeTotal(cr string) (int64, error) {
	_, total, ok := strings.Cut(cr, "/")
	if !ok || !strings.HasPrefix(cr, "bytes ") {
		return 0, fmt.Errorf("malformed Content-Range %q", cr)
	}
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("malformed Content-Range %q", cr)
	}
	return n, nil
}

// isInvalidRange reports whether a ranged GET was refused because the object is empty: AWS
// says InvalidRange, some servers (versitygw) answer 416 with no error code.
func isInvalidRange(err error) bool {
	var e *requestError
	return errors.As(err, &e) && (strings.Contains(e.msg, "InvalidRange") || e.status == http.StatusRequestedRangeNotSatisfiable)
}

// getInto streams the whole object at key into dst from offset 0 (one attempt) and returns
// its size.
func (c *client) getInto(ctx context.Context, key string, dst io.WriterAt) (int64, error) {
	obj, info, _, err := c.getOne(ctx, key, minio.GetObjectOptions{})
	if err != nil {
		return 0, err
	}
	defer obj.Close()
	n, err := io.Copy(io.NewOffsetWriter(dst, 0), obj)
	if err != nil {
		return 0, err
	}
	if n != info.Size {
		return 0, fmt.Errorf("read %d of %d bytes: %w", n, info.Size, io.ErrUnexpectedEOF)
	}
	return n, nil
}
