package s3

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/weightfs/weightfs/store/format"
)

// The change hint: PREFIX/latest, a 32-byte object the writer rewrites after every change of
// the list of manifests (a seal, a version gc dropped) and at open. A reader asks for it with
// If-None-Match: <the ETag it saw last>; the answer is 304 Not Modified, with no body, until the
// writer wrote it again. So a reader can look every 250 ms at the cost of a GET that moves
// 32 bytes at most, and LIST versions/ only when the hint moved (docs/s3.md, "Readers";
// docs/format.md Part I §4.3).
//
// The hint is only ever a reason to look: what a reader then serves comes from its listing and
// the manifests and objects, checked as always. A hint that is damaged, forged or of an unknown
// format is refused (the reader lists at its fallback rate, as if there were none); one that
// changes when nothing else did costs a LIST.

// The hint's bytes are package store/format's (format/hint.go); these are its names here.
const (
	hintKey   = format.HintName // the hint's key under the prefix
	hintMagic = format.HintMagic
	hintSize  = format.HintSize
)

type changeHint = format.ChangeHint

func encodeHint(h changeHint) []byte { return format.EncodeHint(h) }

func parseHint(b []byte) (changeHint, error) { return format.ParseHint(b) }

// hintState is a process's side of the hint: the writer's last write, the reader's last ETag.
type hintState struct {
	mu      sync.Mutex
	latest  uint64      // writer: the newest version it knows of
	written int64       // writer: the time stamp of its last write
	etag    string      // reader: the ETag of the hint it saw last ("" before the first look)
	refused string      // reader: why the last hint it got was refused, said once
	opened  atomic.Bool // writer: the hint was written at open
}

// putHint rewrites the hint after the list of manifests changed (v: a version sealed; 0: one
// removed). A failure is logged and not returned: the change itself is durable, and readers
// find it at their next full listing (store.Poll lists at least every 30 s).
func (b *Backend) putHint(v uint64) {
	h := &b.hint
	h.mu.Lock()
	defer h.mu.Unlock()
	h.latest = max(h.latest, v)
	// Strictly increasing, so that two writes never have the same bytes (the same ETag).
	h.written = max(time.Now().UnixNano(), h.written+1)
	if _, err := b.c.putBytes(b.ctx, b.c.loc.key(hintKey), encodeHint(changeHint{Latest: h.latest, Written: h.written}), putCond{}); err != nil {
		b.log.Warn("s3: the change hint was not written; readers see the change at their next full listing", "err", err)
	}
}

// VersionsHint is store.VersionHinter: it asks S3 whether the hint moved since the previous
// call, by a GET with If-None-Match: the ETag seen then. changed is true at the first call and
// whenever the hint was written again; ok is false when there is no usable hint (none yet, a
// writer that predates it, one refused as damaged or of an unknown format), and the caller then
// lists. A GET that fails is returned as err, with ok false.
func (b *Backend) VersionsHint() (changed, ok bool, err error) {
	h := &b.hint
	h.mu.Lock()
	defer h.mu.Unlock()
	key := b.c.loc.key(hintKey)
	b.c.stats.add(&b.c.stats.hintRequests, 1)
	// The counters file is rewritten at every poll, as when each poll was a listing: what
	// reads it from outside sees a poll's counts within a poll.
	defer b.writeStats()
	data, etag, notModified, err := b.c.getIfChanged(b.ctx, key, h.etag)
	switch {
	case notModified:
		// Still the hint seen last: usable unless that one was refused.
		return false, h.refused == "", nil
	case err != nil:
		h.etag = ""
		if isNotFound(err) {
			return false, false, nil
		}
		return false, false, err
	}
	h.etag = etag
	b.c.stats.add(&b.c.stats.hintChanges, 1)
	if _, perr := parseHint(data); perr != nil {
		if msg := perr.Error(); msg != h.refused {
			b.log.Warn("s3: change hint "+b.c.name(key)+" refused; looking for new versions by listing", "err", perr)
			h.refused = msg
		}
		return false, false, nil
	}
	h.refused = ""
	return true, true, nil
}

// isNotFound reports whether err is a request error for a missing key.
func isNotFound(err error) bool {
	var e *requestError
	return errors.As(err, &e) && e.class == classNotFound
}

// getIfChanged reads the small object at key unless its ETag is still etag (empty: read it in
// any case), retrying transient errors as every request does. notModified is true when the
// server answered 304.
func (c *client) getIfChanged(ctx context.Context, key, etag string) (data []byte, newETag string, notModified bool, err error) {
	err = c.retry(ctx, "GET "+c.name(key), func(ctx context.Context) error {
		opts := minio.GetObjectOptions{}
		if etag != "" {
			if err := opts.SetMatchETagExcept(etag); err != nil {
				return err
			}
		}
		// Core's GetObject answers with the response's status at once (Client's defers it to
		// the first read).
		body, info, _, err := minio.Core{Client: c.mc}.GetObject(ctx, c.loc.Bucket, key, opts)
		var er minio.ErrorResponse
		if errors.As(err, &er) && er.StatusCode == http.StatusNotModified {
			notModified = true
			return nil
		}
		if err != nil {
			return err
		}
		defer body.Close()
		if data, err = io.ReadAll(io.LimitReader(body, hintSize+1)); err != nil {
			return err
		}
		newETag = info.ETag
		return nil
	})
	return data, newETag, notModified, err
}
