package store

import (
	"sync/atomic"
	"time"
)

// What a Store did since Open, for an operator's metrics (the metrics package turns them into
// Prometheus series; this package knows nothing of Prometheus). Counts are cumulative and
// kept where the work is done, so that what a scrape reads is what the store did; events
// whose timing matters (a seal's latency, the lag from a seal to a reader's seeing it) go to
// Options.Observer as they happen.

// Stats are the cumulative counts of a Store since Open (Store.Stats).
type Stats struct {
	// VersionsSealed counts the versions this process sealed (Writer.Seal returned no error:
	// the manifest is durable). SealedLogicalBytes and SealedStoredBytes sum those versions'
	// VersionInfo.LogicalBytes (file sizes) and StoredBytes (the objects the seal added).
	VersionsSealed     int64
	SealedLogicalBytes int64
	SealedStoredBytes  int64
	// FilesStreamed and FilesStaged count the files of those versions by how they came: a
	// stream's file taken as the stream diffed it (AddStream), or a file ingested whole at
	// the seal by the batch path (AddFile, Commit; a stream that had to be redone counts
	// here). Their sum is the sum of the versions' VersionInfo.Files.
	FilesStreamed int64
	FilesStaged   int64
	// VersionsSeen counts the versions another process sealed that Refresh found (a reader;
	// those listed at Open are not counted).
	VersionsSeen int64

	// Cache lookups by the reads of sealed versions (a hit served without rebuilding):
	// CopyHits/CopyMisses for reads of an object's bytes from the materialized copy (a miss:
	// the copy does not hold that object, is being brought forward, or failed its check),
	// PageHits/PageMisses for the in-memory cache of rebuilt 1 MiB pages (a miss rebuilds
	// the page), RenderHits/RenderMisses for the render cache of patches/ and deltas/ (a
	// miss renders the file and caches it).
	CopyHits, CopyMisses     int64
	PageHits, PageMisses     int64
	RenderHits, RenderMisses int64

	// What the writer's retention (Options.Retention, gc_retention.go) did: the runs that
	// dropped versions and those it deferred (GCStats.Deferred), the versions dropped, the
	// bytes its re-anchoring wrote (its cost: GCStats.ReanchorWritten) and the bytes it freed
	// (GCStats.FreedBytes: deleted less what re-anchoring added).
	RetentionRuns, RetentionDeferred int64
	RetentionDroppedVersions         int64
	RetentionWrittenBytes            int64
	RetentionFreedBytes              int64

	// Fsyncs counts the fsyncs of files and directories in the store that its backend made
	// (the local backend: each object file, the object directories that gained entries, each
	// manifest and its directory, the records and theirs; 0 on a backend that counts none,
	// S3). IndexWrites counts the read-write transactions of the node-local index (in the
	// cache directory, the store's cache/ for a writer by default), which syncs nothing: it
	// is a derived cache, opened with bbolt's NoSync (index.go). What a version costs in
	// fsyncs is the growth of Fsyncs over its seal: `make bench` figure moe.
	Fsyncs      int64
	IndexWrites int64
}

// Observer is told of the events of a Store whose timing matters (Options.Observer). Calls
// come from the goroutine that did the work, after the Stats counts are updated: they must
// be quick and must not call back into the Store.
type Observer interface {
	// Sealed: version info is durable. seal is the time Writer.Seal took; ingest is the time
	// from the version's first file (the first AddFile, StreamFile or AddStream) to the
	// seal's return, the time over which info.LogicalBytes went in.
	Sealed(info VersionInfo, seal, ingest time.Duration)
	// Seen: Refresh found version info, sealed by another process (info.Created is when),
	// at time at, from when it is listed by Versions.
	Seen(info VersionInfo, at time.Time)
}

// storeStats are the live counters behind Stats.
type storeStats struct {
	versionsSealed, sealedLogical, sealedStored atomic.Int64
	filesStreamed, filesStaged                  atomic.Int64
	versionsSeen                                atomic.Int64
	copyHits, copyMisses                        atomic.Int64
	pageHits, pageMisses                        atomic.Int64
	renderHits, renderMisses                    atomic.Int64

	retentionRuns, retentionDeferred, retentionDropped atomic.Int64
	retentionWritten, retentionFreed                   atomic.Int64
}

// Stats returns what the store did since Open.
func (s *Store) Stats() Stats {
	c := &s.stats
	return Stats{
		VersionsSealed: c.versionsSealed.Load(), SealedLogicalBytes: c.sealedLogical.Load(),
		SealedStoredBytes: c.sealedStored.Load(),
		FilesStreamed:     c.filesStreamed.Load(), FilesStaged: c.filesStaged.Load(),
		VersionsSeen: c.versionsSeen.Load(),
		CopyHits:     c.copyHits.Load(), CopyMisses: c.copyMisses.Load(),
		PageHits: c.pageHits.Load(), PageMisses: c.pageMisses.Load(),
		RenderHits: c.renderHits.Load(), RenderMisses: c.renderMisses.Load(),
		RetentionRuns: c.retentionRuns.Load(), RetentionDeferred: c.retentionDeferred.Load(),
		RetentionDroppedVersions: c.retentionDropped.Load(),
		RetentionWrittenBytes:    c.retentionWritten.Load(), RetentionFreedBytes: c.retentionFreed.Load(),
		Fsyncs: s.be.fsyncs(), IndexWrites: s.ix.writeCount(),
	}
}

// hit counts one lookup of a cache: into hits when hit, else into misses.
func hit(hits, misses *atomic.Int64, hit bool) {
	if hit {
		hits.Add(1)
	} else {
		misses.Add(1)
	}
}

// noteFileStart marks when the writer's first file began (the start of its ingest time).
func (w *Writer) noteFileStart() {
	w.mu.Lock()
	if w.started.IsZero() {
		w.started = time.Now()
	}
	w.mu.Unlock()
}

// markStreamedLocked records, with w.mu held, that the file at p is the one a stream diffed
// (AddStream), or, with streamed false, that it came by the batch path (AddFile).
func (w *Writer) markStreamedLocked(p string, streamed bool) {
	if w.streamed == nil {
		w.streamed = map[string]bool{}
	}
	if streamed {
		w.streamed[p] = true
	} else {
		delete(w.streamed, p)
	}
}

// noteSealed counts a sealed version and tells the observer; sealStart is when Seal began.
func (w *Writer) noteSealed(info VersionInfo, sealStart time.Time) {
	s := w.s
	w.mu.Lock()
	streamed := 0
	for p := range w.files {
		if w.streamed[p] {
			streamed++
		}
	}
	started := w.started
	w.mu.Unlock()
	c := &s.stats
	c.versionsSealed.Add(1)
	c.sealedLogical.Add(info.LogicalBytes)
	c.sealedStored.Add(info.StoredBytes)
	c.filesStreamed.Add(int64(streamed))
	c.filesStaged.Add(int64(info.Files - streamed))
	if s.opts.Observer == nil {
		return
	}
	now := time.Now()
	if started.IsZero() || started.After(sealStart) {
		started = sealStart
	}
	s.opts.Observer.Sealed(info, now.Sub(sealStart), now.Sub(started))
}

// NewerVersions is how many sealed versions are newer than v: how far a reader of v is
// behind the latest (0 for the latest itself). Cheap: a reader may ask it on every read.
func (s *Store) NewerVersions(v uint64) int { return s.versions.newer(v) }
