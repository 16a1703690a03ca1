package store

import "errors"

// errInjected is what test failpoints return: the operation stops at that point as if the
// process had died there (no clean-up runs).
var errInjected = errors.New("injected failure")

// Failpoints, in the order a seal passes them:
//
//	seal-objects-written   every object is written, none synced
//	seal-objects-synced    objects durable, manifest not written
//	seal-manifest-written  manifest durable (the version exists), index not updated
//	seal-index-updated     index updated, materialized copy not brought forward
//	materialize-partial    half of the in-place updates of the copy applied
//
// of the streaming path (before the seal):
//
//	stream-base-read       before a stream worker reads a chunk's base bytes
//	stream-object-put      before a stream worker writes a delta object
//
// of Commit:
//
//	commit-file-read       a source file is read and added, its stamp not yet compared
//
// of a writer group's rank (group.go; the publisher passes the seal's):
//
//	part-objects-written   the part's objects written, not synced, no part record
//	part-written           the part record durable, the open marker not yet removed
//
// and of GC:
//
//	gc-reanchored          kept versions re-anchored, no manifest deleted
//	gc-recorded            the dropped versions in the gc record, no manifest deleted
//	gc-manifests-deleted   old manifests deleted, no object deleted
//	gc-object-deleted      after each object the sweep deletes
