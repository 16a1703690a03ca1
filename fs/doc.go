// Package fs serves a weightfs store over FUSE (github.com/hanwen/go-fuse/v2, node API).
//
// The mount serves a VersionStore, which lists everything it calls on a store (versions,
// damage, reads, holds, the views' renders, writers with their streams): *store.Store
// through FromStore, a writer group's rank through FromRank. Nothing beyond it is asserted at
// run time, so the tests' in-memory fake goes down the production paths; a store without a
// capability says so through the same methods (versionstore.go).
//
// # Layout
//
//	MNT/latest            symlink to the newest sealed weight_vNNNNNN
//	MNT/weight_vNNNNNN/   a sealed version, served from the store
//	MNT/patches/          derived views of sealed versions (see views.go); on a read-write
//	                      mount a patch written here seals the next version (view_patches_in.go)
//	MNT/deltas/           slime's delta checkpoints of sealed versions (views.go); on a
//	                      read-write mount slime's disk sender writes weight_vNNNNNN/ here,
//	                      sealed when its index is renamed into place (view_deltas_in.go)
//	MNT/weight_vNNNNNN/   an open version (read-write mount only, until sealed)
//	MNT/anything-else/    a staging directory (read-write mount only)
//
// With Options.Version set, MNT itself is that sealed version's directory.
//
// # What is immutable, what is cached
//
// A sealed version never changes: its directory tree, sizes and bytes are fixed by the store's
// manifest. So its inodes are built from the store's entry list once per version, the kernel
// may cache its entries and attributes for a long time (sealedTTL), and its files are opened
// with FOPEN_KEEP_CACHE so pages stay in the page cache across opens (and mmap shares them).
// After mounting, the kernel's read-ahead for the mount is raised to ReadAheadKiB (FUSE's INIT
// caps it at 128 KiB; root only, a failure is logged and ignored): with several 1 MiB read
// requests in flight, the store rebuilds the next pages of an old version while the reader
// copies the last ones.
//
// Open versions and staging directories are an in-memory tree of persistent inodes (go-fuse's
// tree is the source of truth for names). A file of an open version that is written in order,
// each write landing exactly at its end (what save_pretrained and cp do), is *streamed*: its
// bytes go straight to the store's FileStream, which diffs them against the materialized
// previous version as they arrive, so only the delta ever reaches the disk (stream.go). The
// first write elsewhere, a read of a file still being written, a truncate to another size or
// an unlink of an open file switches that file for good to a staging file on disk: the
// stream hands back every byte it took (checked by hash), and the batch path takes over at
// the seal. Files of staging directories (renamed into a version later) are always staged.
// All these files are opened with direct I/O where the kernel still lets such files be mapped
// shared (CAP_DIRECT_IO_ALLOW_MMAP, Linux 6.6; openFileFlags): a checkpoint's bytes then do
// not pass through the page cache of the FUSE file on their way to the store. Every change
// goes through this kernel mount, so the kernel's caches stay coherent with ordinary
// one-second timeouts. Staging files are not fsynced: an open version is not durable by
// design, and after a crash it is gone.
//
// A file of a sealed version that is open (or mapped) holds its version from gc until its last
// release, as an unlinked file stays readable through its descriptors (store.Store.Hold: a
// writer's retention keeps it; a read-only mount pins it while it is open), so that a
// retention that drops the version never cuts a reader off with a short read.
//
// The root is dynamic: it is computed from the store's version list and the open trees on every
// lookup and listing. Negative lookups are not cached, so a version sealed by another process
// appears on a read-only mount as soon as its poller's Store.Poll has listed it (a Refresh,
// which, for a store that keeps a materialized copy, returns the new version only once the
// copy holds it, so that its first reads are reads of the copy; the previous version is
// served meanwhile).
//
// Staging files live in STAGING/mount-PID-*/tree-N/fN, where STAGING is Options.StagingDir, or
// the store's staging directory (STORE/cache/staging for a local store). A read-write mount
// removes the directories of mounts whose process is gone, so a killed daemon's bytes do not
// pile up; its open versions are gone, as the contract says.
//
// # Sealing
//
// An open version is sealed by the FLUSH (close(2)) of a file named DONE at its top, or a
// staging directory by its rename to weight_vNNNNNN. Every file and directory of the tree goes
// to the store's Writer (AddDir, AddFile), then Writer.Seal; close or rename returns only once
// the store says the version is durable, with the store's error (EIO, ENOSPC, ...) otherwise,
// and then the tree stays open and writable and a later seal starts over with a fresh Writer.
// A write into the tree that failed (ENOSPC, EIO) leaves its file without bytes its writer
// meant it to hold: until they are written again, or the file is truncated below them or
// removed, every seal fails with EIO and names the file (writefail.go), so a retried DONE
// never seals a truncated checkpoint.
// A top-level DONE is never stored. The seal takes the tree's lock exclusively, so it waits
// for writes in flight, and writes that come after it get EPERM.
//
// DONE is a marker: its content is ignored, never an error (done.go). Bytes written into it
// are not stored and a line says so; `echo x > DONE` seals the version and succeeds, though
// the shell closes its first descriptor of DONE, which seals, before echo writes through the
// second: a write through a descriptor of DONE that outlived the seal is taken and dropped.
// Likewise touch(1) closes a first descriptor of DONE (which seals) before it sets the times
// through a second one: setting only the times of DONE is accepted after the seal. A second
// DONE in a sealed version is a modification of a sealed version (EPERM).
//
// After the seal the root entry is invalidated, so the next lookup serves the sealed version
// from the store, and the staging files are unlinked (descriptors still open on them keep
// reading the same bytes until they are closed). The invalidation is synchronous for DONE (the
// kernel holds no directory lock during FLUSH) and asynchronous for a rename (the kernel holds
// the root's lock until the rename returns).
//
// # Mount points and who may use a mount
//
// Mount refuses a mount point that is already the mount point of a live file system
// (ErrAlreadyMounted, read from /proc/self/mountinfo) and one that holds files
// (ErrMountpointNotEmpty) unless Options.AllowNonEmpty; a daemon calls CheckMountpoint first,
// before it opens the store. A mount point left by a dead daemon is detached, not refused.
// Only the mounting user may use a mount unless Options.AllowOther, which always comes with
// default_permissions: the kernel checks each access against the modes and owner (the
// mounting user) that the attributes carry. As a user other than root, AllowOther needs
// user_allow_other in /etc/fuse.conf (ErrAllowOtherForbidden, checked before mounting).
//
// # Unmounting
//
// Server.Unmount unmounts and waits until serving has stopped; open versions are aborted.
// A daemon hands its SIGTERM, SIGINT and SIGHUP to Server.UnmountOnSignals, which asks for an
// unmount at each one until one succeeds: while the mount is busy (a process has a file, a
// mapping or its working directory in it) the kernel refuses, the mount keeps serving, the log
// names the processes that hold it (MountHolders, read from /proc like fuser(1)), and the next
// signal tries again. No signal leaves a dead mount behind.
//
// # Errors at the boundary
//
// Every error that reaches the kernel is a syscall.Errno:
//   - EPERM: a modification of a sealed version, of latest, patches/ (but for a patch written
//     in: view_patches_in.go) or deltas/ (but for a delta written in: view_deltas_in.go), or a kind of
//     file the store cannot hold (symlinks, hard links, devices); a file created at the root;
//     a rename of a staging directory to a version number that is not above every sealed and
//     open version, or to a version-like name that is not one (where mkdir answers EINVAL:
//     mv(1) reads EINVAL from rename as "cannot move to a subdirectory of itself").
//   - EROFS: any modification on a read-only mount (the kernel also enforces it: the mount is
//     made with MS_RDONLY).
//   - EEXIST: mkdir of a version number that is already sealed or open, or of a reserved name.
//   - EINVAL: mkdir of a version number that is not above every sealed and open version, or
//     of a version-like name that is not weight_v plus six or more digits; a name
//     in an open version that the store cannot hold (store.CheckPath refuses it: not UTF-8),
//     at create, mknod, mkdir or rename, rather than at the seal.
//   - ENAMETOOLONG: a name of more than store.MaxNameLen (255) bytes, what statfs
//     advertises, at create, mknod, mkdir, symlink, link and rename, and at lookup of such a
//     name; the store's ErrNameTooLong likewise. A path has no bound of its own, as on ext4
//     (the kernel refuses a path of PATH_MAX or more given to one call before it comes here).
//   - EXDEV: a rename between two different open trees, or between a tree and the root.
//   - EIO: the store failed to read (a corrupt or missing object: ErrCorrupt) or to seal.
//     Damage wins over any errno in the error's chain: a missing object file carries the
//     OS's ENOENT, but a listed file whose bytes are gone is damage, not absence. ENOSPC and
//     other errnos from the store pass through unchanged, and the store's sentinels map to
//     the nearest errno (ErrVersionNotAbove and ErrVersionOutOfRange EINVAL, ErrVersionBusy
//     EEXIST, ErrNoSuchVersion and ErrNoSuchFile ENOENT, ErrReadOnly EROFS, ErrLocked EBUSY).
//   - EINVAL at the close or rename of a patch written into patches/ that cannot make the
//     next version (store.ErrBadPatch: its base is not the latest version, a base identity or
//     checksum fails, a tensor the base lacks or of another dtype or shape, truncated, a
//     position outside its tensor); nothing is sealed and the reason is in
//     patches/weight_vNNNNNN.safetensors.rejected (view_patches_in.go).
//   - ENODATA: a seal of a tree that holds no file (an open version with DONE alone).
//   - ESTALE: an open of a file of an open version that was sealed meanwhile through a
//     cached path; the kernel then looks the path up again and finds the sealed file. So
//     does the open or stat of a patch or delta file written in once it was sealed or
//     refused and no handle holds it (staged_upload.go): the name then shows what the view
//     serves there, never the upload's size beside the served bytes.
//
// A refused seal (DONE's close, or the rename of a staging directory) also leaves its reason
// and what to do in DIR/.refused, at the top of the directory that was to be sealed: a file
// of the mount, never stored, replaced by the next refusal and gone with the seal that
// succeeds (refused.go), so a trainer learns why without the daemon's log. An open version
// or staging directory dropped at unmount is logged (warn) with its files.
//
// Every refusal (info) and every store failure (warn; error when it returns EIO) is logged
// through Options.Logger with the path and the reason, since an errno alone cannot say why,
// and counted by its errno in Server.Stats, with the reads of sealed versions by how far
// behind the latest they are (stats.go; the metrics package exports them).
package fs
