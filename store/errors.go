package store

import (
	"errors"
	"fmt"

	"github.com/weightfs/weightfs/store/format"
)

// Sentinel errors of the package. Callers test with errors.Is; the messages of the wrapping
// errors carry the context (which object, which version, which file).
var (
	// ErrCorrupt marks store data that fails a check: a CRC, a SHA-256, a framing rule. Reads
	// return it rather than wrong bytes; Verify reports it per object and per version.
	ErrCorrupt = format.ErrCorrupt // the codecs' own (package store/format)
	// ErrDamagedRender marks a cached render (a patch or a slime delta in the cache
	// directory) whose bytes failed their sums or whose file went missing or short: the read
	// served nothing, the render was dropped (and logged), and rendering it again from the
	// store gives the right bytes.
	ErrDamagedRender = errors.New("cached render failed its check")
	// ErrVersionNotAbove marks a new version whose number does not exceed every sealed one.
	ErrVersionNotAbove = errors.New("version number is not above the latest sealed version")
	// ErrNoSuchVersion marks a version number that is not sealed in the store.
	ErrNoSuchVersion = errors.New("no such version")
	// ErrNoSuchFile marks a path that is not a file of the version.
	ErrNoSuchFile = errors.New("no such file in version")
	// ErrLocked marks a second writer: another process (or another Open in this one) holds
	// the store's writer lock.
	ErrLocked = errors.New("store is locked by another writer")
	// ErrLeaseNotRenewed marks a writer whose lease (an S3 store's) could not be renewed in
	// time: the bucket did not answer, or answered too late. No other writer is known to hold
	// it; writes stop until a renewal succeeds, to stay safe. Not ErrLocked.
	ErrLeaseNotRenewed = errors.New("the writer's lease could not be renewed")
	// ErrNotAStore marks a path that holds no weightfs store (no or an alien format file).
	ErrNotAStore = format.ErrNotAStore // the codecs' own (package store/format)
	// ErrUnsupportedVersion marks a store, object or manifest of an unknown format version;
	// it is refused, never read "best effort".
	ErrUnsupportedVersion = format.ErrUnsupportedVersion // the codecs' own (package store/format)
	// ErrPinUnsupported marks a pin asked of a store that cannot hold pin records (an S3
	// store: gc_pins.go).
	ErrPinUnsupported = errors.New("this store cannot hold reader pins")
	// ErrVersionRemoved marks a read of a version whose manifest gc has removed since the
	// reader loaded it. It wraps ErrNoSuchVersion (not ErrCorrupt): nothing is damaged.
	ErrVersionRemoved = fmt.Errorf("version removed by gc: %w", ErrNoSuchVersion)
	// ErrEmptyVersion marks a version with no files: there is nothing to commit.
	ErrEmptyVersion = errors.New("nothing to commit: the version is empty")
	// errSeedBehind marks a seed whose writes the disk did not complete within the time the
	// stream may wait for them (copy_seed.go): the seed is given up, never the stream.
	errSeedBehind = errors.New("the seed's disk did not keep up")
	// ErrReadOnly marks a write operation on a store opened read-only.
	ErrReadOnly = errors.New("store is open read-only")
	// ErrVersionBusy marks a version number that an open Writer already builds.
	ErrVersionBusy = errors.New("version is already open for writing")
	// ErrWriterDone marks a call on a Writer that has been sealed or aborted.
	ErrWriterDone = errors.New("writer is already sealed or aborted")
	// ErrBadPath marks a path that is not a clean, relative, slash-separated path.
	ErrBadPath = format.ErrBadPath // the codecs' own (package store/format)
	// ErrNoPrevious marks a version that has no sealed predecessor, so no patch.
	ErrNoPrevious = errors.New("version has no previous version")
	// ErrLayoutChanged marks a version whose tensor layout (safetensors files, tensor names,
	// dtypes, shapes) differs from its predecessor's: it has no patch (docs/format.md Part III §2).
	ErrLayoutChanged = errors.New("tensor layout changed")
	// ErrClosed marks a call on a closed Store.
	ErrClosed = errors.New("store is closed")
	// ErrVersionOutOfRange marks a version number above MaxVersion (refused by Commit,
	// NewVersion and manifest validation).
	ErrVersionOutOfRange = format.ErrVersionOutOfRange // the codecs' own (package store/format)
	// ErrNameTooLong marks a path with an element longer than MaxNameLen bytes (the fs
	// package answers ENAMETOOLONG).
	ErrNameTooLong = format.ErrNameTooLong // the codecs' own (package store/format)
	// ErrSourceChanged marks a source file that changed while Commit or Writer.AddFile read
	// it (two reads of its bytes disagree, or its size, mtime or ctime moved): nothing of it
	// is added. Commit it again once its writer is done.
	ErrSourceChanged = errors.New("source file changed while it was read")
	// ErrManifestTooLarge marks a version whose manifest would exceed what readers accept
	// (1 GiB of JSON): the seal refuses it.
	ErrManifestTooLarge = errors.New("manifest too large")
	// ErrGroupIncomplete marks a publish of a writer group's version that lacks some rank's
	// part (the message names the ranks): nothing is published; publish again once they
	// have sealed (group.go).
	ErrGroupIncomplete = errors.New("writer group: parts missing")
	// ErrGroupConflict marks a writer group's version in which two ranks wrote one path (or
	// one wrote a file where another made a directory): the message names both ranks, and
	// nothing is published.
	ErrGroupConflict = errors.New("writer group: two ranks wrote one path")
	// ErrGroupMismatch marks ranks that disagree with the publisher: on the version number,
	// on the number of ranks, or on the version they diffed against (a part begun before the
	// latest version appeared). The message names the rank; nothing is published.
	ErrGroupMismatch = errors.New("writer group: ranks disagree")
	// ErrGroupRefused marks a writer group's version that its publisher refused (a refusal
	// record, docs/format.md Part I §9, says why and names the ranks): a rank waiting on it
	// or beginning it fails with this; the group writes its next save under a higher number.
	ErrGroupRefused = errors.New("writer group: version refused by the publisher")
	// ErrGroupRank marks an operation of the wrong side of a writer group: a Seal or gc on a
	// rank's store, a part on a store not opened as a rank, a publish on a reader.
	ErrGroupRank = errors.New("writer group: not allowed here")
	// ErrGroupUnsupported marks a store whose backend cannot hold a writer group's records.
	ErrGroupUnsupported = errors.New("writer groups are not supported by this store's backend")
	// ErrBadPatch marks a patch given to CommitPatch that cannot make the next version: its
	// base is not the latest version, a base identity or checksum fails, it names a tensor
	// the base lacks or gives another dtype or shape, it is truncated or malformed, or a
	// position lies outside its tensor. Nothing is sealed (ingest_patch.go).
	ErrBadPatch = errors.New("patch refused")
)

// errNoDirectIO marks a file system that refuses O_DIRECT: its files are read through the
// page cache (internal).
var errNoDirectIO = errors.New("O_DIRECT not supported")
