// Package fs serves a weightfs store over FUSE (github.com/hanwen/go-fuse/v2, node API).
//
// # Layout
//
//	MNT/latest            symlink to the newest sealed weight_vNNNNNN
//	MNT/weight_vNNNNNN/   a sealed version, served from the store
//	MNT/patches/          derived views of sealed versions (see views.go)
//	MNT/deltas/
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
//
// Open versions and staging directories are an in-memory tree of persistent inodes (go-fuse's
// tree is the source of truth for names) whose file bytes live in staging files on disk, one
// per file, in a per-tree directory under the staging root. Every change goes through this
// kernel mount, so the kernel's caches stay coherent with ordinary one-second timeouts.
// Staging files are not fsynced: an open version is not durable by design, and after a crash
// it is gone.
//
// Sealing (closing a file named DONE at the top of an open version, or renaming a staging
// directory to weight_vNNNNNN) hands every file to the store's Writer and returns only once the
// store says the version is durable. Then the root entry is invalidated so the next lookup
// serves the sealed version from the store, and the staging files are unlinked (open
// descriptors keep working until the kernel forgets the old inodes).
//
// The root is dynamic: it is computed from the store's version list and the open trees on every
// lookup and listing. Negative lookups are not cached, so a version sealed by another process
// appears on a read-only mount as soon as its poller has called Store.Refresh.
//
// # Errors at the boundary
//
// Every error that reaches the kernel is a syscall.Errno:
//   - EPERM: a modification of a sealed version, of latest, patches/ or deltas/, or a kind of
//     file the store cannot hold (symlinks, hard links, devices); a file created at the root.
//   - EROFS: any modification on a read-only mount (the kernel also enforces it: the mount is
//     made with MS_RDONLY).
//   - EEXIST: mkdir of a version number that is already sealed or open, or of a reserved name.
//   - EINVAL: mkdir or rename to a version number that is not above every sealed and open
//     version, or a version-like name that is not weight_v plus six or more digits.
//   - EXDEV: a rename between two different open trees, or between a tree and the root.
//   - EIO: the store failed to read (a corrupt object: ErrCorrupt) or to seal; ENOSPC and
//     other errnos from the store pass through unchanged.
//
// Every refusal and every store failure is reported through Options.Logf with the path and the
// reason, since an errno alone cannot say why.
package fs
