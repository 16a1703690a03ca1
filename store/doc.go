// Package store owns the versioned, content-indexed store of weights: immutable objects named
// by the SHA-256 of their content (whole, or as sparse deltas against the previous version of
// the same tensor), version manifests written last, the node-local bbolt index, the
// materialized copy of the latest version, ingest, reads of any version at any offset,
// verification and garbage collection. docs/format.md (Part I) has every byte and the
// crash-safety argument; docs/design.md the reasons. The bytes themselves (the format file,
// object files, manifests, readers' pins, the gc record, writer groups' records, the index's
// records, identities) are package store/format, and those of packs and pack indexes
// package store/pack: this package does with them what a store does (I/O, caches, state),
// under its old names for them (object.go, manifest.go, format.go, id.go, group_record.go
// and the heads of gc_record.go, gc_pins.go and index.go are aliases).
//
// # Backends
//
// The store keeps its bytes through Backend, and nothing else: the local directory
// (package store/local, which Open and OpenRank build) or another kind given to OpenBackend
// (package store/s3 for s3://bucket/prefix; package store/location chooses from a STORE
// argument). The contract is package store/backend's types, which this package names by
// the same names (backend.go), and package store/backendtest checks every backend against
// it. A backend with a local cache of a remote store's objects (RemoteCache: the object cache) is told by the
// store what to fetch ahead and when to empty it: that policy is the store's
// (cache_policy.go). The optional parts of a backend (RemoteCache, Records, VersionHinter,
// RemoteStat, Quarantiner, PackQuarantiner) are asserted once, at open, into the store's backendCaps
// (backend.go). The small records both real backends keep, the gc record, a writer group's
// records and readers' pins, are one API, Records.
// A backend that also keeps packs (PackBackend, store format 3) gets the pack layer in front
// of it (packedObjects, pack_layer.go, pack_write.go, pack_read.go; backendCaps.usePacks):
// the Backend every part calls, so objects, gc, verify and ingest keep calling PutObject,
// OpenObject, ListObjects and DeleteObject, while the layer appends objects to packs, writes
// one pack index (a record of kind RecordIndex) per SyncObjects, finds each packed object
// through the indexes (package store/pack has the bytes), and serves the loose objects of
// stores of format 1 and 2 from the backend as before. A packed record that fails a read's
// checks is passed over for the object's next intact copy (pack_copies.go).
// This package imports no S3 client.
//
// # Processes and locking
//
// Exactly one process writes a store's manifests: the writer holds the backend's lock (Open without
// ReadOnly takes an exclusive flock on STORE/lock; store/s3 a lease object taken and renewed
// by conditional puts), which the store closes last; a second writer gets ErrLocked. Any
// number of processes read it (ReadOnly: no lock, nothing in the store is written but a
// reader's pin, STORE/pins/*.json, which keeps its version from gc: gc_pins.go, also written for
// the versions of the files a reader holds open, gc_hold.go), each with its
// own cache directory; they see versions
// sealed after their Open once they call Refresh (one that keeps a materialized copy, once
// Refresh has also brought the copy to the new version: version_list.go). gc runs in the writer's process, by hand
// (GC, GCWith) or after every seal (Options.Retention, gc_retention.go), beside open Writers. A Store is safe for concurrent use
// by many goroutines; Close it after every other call has returned.
//
// A writer group lets several processes write one version (group.go, the rank's state asked through group_rank_api.go; docs/format.md Part I
// §9): each rank (OpenRank: no writer's lock, a lock of its rank) stores the objects of its
// own files and seals a part record (NewPart, Writer.SealPart); the writer checks every
// part's files against their SHA-256 and publishes the parts as one manifest (PublishGroup),
// so the version appears whole or not at all; a rank's WaitPublished succeeds only if the
// version holds its part (group_holds.go).
//
// # What is immutable, what is cached
//
// Objects and manifests never change once written (GC may replace a delta object by a whole
// copy of the same content, and re-code a delta section as version 1 with the same changes;
// a read that fails on what its process cached of objects another process's gc changed drops
// that and is tried once more from the files: read_reload.go). So everything decoded is cached by identity, in memory (bounded:
// Options.CacheBytes) and in the index: object headers, delta bodies, decoded delta blocks,
// 1 MiB pages of reconstructed content. On disk, in the cache directory, three caches keep bytes of the store, each with one
// name: the materialized copy (the latest version, copy_*.go), the file copies (files of older versions, filecopy.go) and,
// for a remote store, the object cache (its objects, kept by the backend: RemoteCache). A delta section of body version 2 decodes against its
// context, the delta section of its base, whose blocks come from the same cache (object_delta_context.go). The materialized copy (the latest version as
// plain files, in the cache directory) is the one thing that changes: after each seal it is
// brought forward (in the background for the mount; a file that was streamed by renaming the
// seed its stream wrote into place, copy_seed.go) under a lock that keeps reads off it while
// it changes; reads of the newest version replay deltas until it is done. A writer whose base
// in memory holds the version it sealed (Options.BaseMemory) defers it: the copy stays at an
// older version until a reader of the process reads the latest version or the next Open, and
// only the deltas reach the disk at the seal (copy_defer.go); meanwhile reads of the latest
// version take its tensors from the memory, each hashed against its identity before its
// first byte is served (read_basemem.go). It is a
// checked cache: every read of it is checked against CRC-32C sums of its files' content
// (copy_sums.go) and a mismatch is served from the objects and the copy rebuilt; a copy that
// cannot be built is dropped with a log line (reads replay), never an error of Open or Seal.
// Every byte a file read through OpenFile serves is checked per tensor (read_check.go): bytes
// rebuilt from the objects only once the tensor's whole content, as the read path rebuilds it,
// hashed to the tensor's xxh3-128 that its manifest keeps (manifest format 4), else to its
// identity (the SHA-256; the manifest binds both to the tensor's file, name and offsets), once
// per process and recorded in the index; a mismatch fails the reads of that
// tensor with ErrCorrupt, never wrong bytes. No read waits for a pass over a whole file. The
// checks guard against damage, bugs and mistakes, not against one who can write the store and
// recompute its checksums (docs/design.md, "What the checks guard against"). A file of an older
// version opened and read from the objects a second time has a checked copy of it written into
// the cache directory in the background (a file copy), which serves the reads after it
// (bounded by Options.FileCopyBytes, checked on every read like the materialized copy:
// filecopy.go). The index is derived: a damaged one (an
// error or a panic of bbolt, in any goroutine, or a record failing its CRC) is recreated and
// logged; it costs re-reading manifests and object headers, never a failed read or a dead
// process (index.go). It records its store, and one of another store (a cache directory
// reused) is emptied at open (index_identity.go).
//
// # Writing
//
// Commit ingests a directory (the batch path); the mount uses NewVersion, then
// Writer.StreamFile/AddStream for files written in order (the streaming path: diffed as the
// bytes arrive) or Writer.AddFile for staged files, AddDir, and Writer.Seal. Both paths store
// the same objects and manifests; tests compare them. Each file is parsed as safetensors; each tensor is diffed against the same
// tensor of the latest version (from the materialized copy, or from memory) and stored as a delta, a whole
// copy (an anchor, which bounds how many deltas a read replays), or not at all when its
// content is already stored. With Options.BaseMemory the writer keeps the tensors of the
// version it sealed in memory, and the next version's diffs read their bases from there
// instead of the copy, checked by a digest taken with them (a streamed tensor's xxh3-128, else
// a CRC-32C: ingest_basemem.go). Nothing is
// visible until Seal writes the manifest. A crash at any point leaves every sealed version intact and the interrupted one absent.
//
// CommitPatch seals the next version from a one-file patch against the latest version (what a
// trainer writes into MNT/patches/): checked whole first (ErrBadPatch), then each changed file
// is made in one pass (ingest_patch_fast.go): the base's bytes read once (from the base in
// memory, the copy, or, while the copy is deferred, the store's read path: a patch does not
// bring a deferred copy forward) with the patch's values laid over them, each changed tensor
// encoded against its base by the ingest's encoder and stored by its rules, one sha256x2 pass
// for the file's and the tensors' SHA-256; unchanged tensors and files by reference: the
// objects and manifest a full ingest of the same bytes would store, and no full copy. When the
// patch's files leave cores free (a file on 2 cores or more with the base in memory, else 3),
// each file's tensors are made on several goroutines while one more hashes the new file in
// order: from the tensors' bytes in memory, handed to it (ingest_patch_hand.go), else read
// again (ingest_patch_split.go). The reference path
// (ingest_patch.go: the base through OpenFile, the ingest's tensor job) makes what the fast
// path cannot (the copy neither at the patch's base nor deferred there). CommitSlimeDelta does the same from
// slime's delta checkpoint (overwrite or xor, what slime's sender writes into MNT/deltas/),
// checking each changed tensor's xxh3-128 in the pass that hashes its file; slime's first
// delta, from its seed 000000, is CommitSlimeDeltaOnSeed: applied to the seed checkpoint on
// disk, it seals the store's first version (ingest_slime.go, ingest_slime_seed.go).
//
// New objects go into packs (store format 3; docs/format.md Part I §1, §3.5): delta objects
// and whole objects of up to 4 MiB of content are built in memory and appended to the
// process's open pack (putObjectBytes; the stream path's objStream too, and a whole-file
// object that ends within its first chunk), larger ones through a temporary file, which becomes
// a pack of its own when it is 16 MiB or more. The seal finishes the open pack, makes the
// packs durable, writes one pack index for them, and names it in the manifest (its field
// indexes): a version costs one fsync per pack (about 64 MiB), the index, the manifest and
// their directories, whatever its number of tensors. A reader's Refresh reads the indexes a
// new version's manifest names before it shows the version; an object it finds in none makes
// it read every index once more (gc may have consolidated them).
//
// # Counts
//
// Stats counts what the store did since Open (seals and their bytes and files, versions a
// reader found, hits and misses of the caches reads use, the fsyncs of the local backend and
// the index's writes), where it is done; Options.Observer hears of each seal and each
// version found as they happen (stats.go). The metrics package exports them; this package
// knows nothing of Prometheus.
//
// # Errors
//
// Errors wrap the sentinels of errors.go: ErrCorrupt for anything that fails a check (reads
// return it rather than wrong bytes; it names the object or file), ErrVersionNotAbove,
// ErrVersionOutOfRange (above MaxVersion), ErrNameTooLong (a path element over MaxNameLen
// bytes; a whole path has no bound), ErrBadPath, ErrSourceChanged (a source file changed while
// Commit or AddFile read it), ErrManifestTooLarge (the seal refuses a manifest readers would
// refuse), ErrNoSuchVersion (and ErrVersionRemoved, a version gc removed while a reader
// served it: not damage), ErrNoSuchFile, ErrPinUnsupported, ErrLocked, ErrLeaseNotRenewed, ErrNotAStore, ErrUnsupportedVersion,
// ErrEmptyVersion, ErrReadOnly, the writer groups' ErrGroupIncomplete, ErrGroupConflict,
// ErrGroupMismatch, ErrGroupRank and ErrGroupUnsupported (each naming the ranks), ErrBadPatch (CommitPatch, CommitSlimeDelta: a patch or delta that cannot make the next version), and the operating system's errors (a full disk wraps
// syscall.ENOSPC) as they come.
//
// # Damage
//
// A version whose manifest cannot be read is skipped, not fatal: it leaves the list with a
// log line naming it and `weightfs verify --repair`, reads of it return ErrCorrupt saying the
// same, Latest is the newest readable version, and new versions are numbered above it.
// Verify gives no verdict on an I/O error (VerifyReport.Unreadable). Repair mends damaged
// objects from intact checked copies (the materialized copy, file copies) and moves into STORE/quarantine/ only what stays damaged,
// never a version that a read path serves exactly (repair.go, repair_mend.go). gc records
// the versions it drops (STORE/dropped, gc_record.go) before it deletes their manifests, so
// that Verify tells a version gc dropped from one whose manifest was lost.
//
// # Permissions
//
// A store is private (0700 directories, 0600 files, 0400 objects); InitShared makes one its
// group may read. New files take the read bits of the store's format file; caches are always
// private (perm.go).
package store
