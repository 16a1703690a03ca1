package fs

import (
	"syscall"

	"github.com/weightfs/weightfs/store"
)

// Names of open versions are checked when they are made (create, mknod, mkdir, symlink,
// link, and the target of a rename), not at the seal: a name the store cannot hold must fail
// the call that makes it, with the errno a local file system gives, rather than the seal
// later, or worse, the bringing forward of the store's materialized copy after a seal that
// succeeded (a name of 256 bytes or more is fine in a manifest and fails in the copy's
// directory with ENAMETOOLONG, at every later seal and mount).
//
// Two rules, in this order: a name is at most maxNameLen bytes (ENAMETOOLONG: what statfs
// advertises, the store's store.MaxNameLen), and the path is one the store's own check
// (store.CheckPath, the function its writer and manifest reader call) accepts, so the two
// cannot disagree: EINVAL for what it refuses (a name that is not UTF-8, which the manifest
// would not give back as it was), ENAMETOOLONG for its ErrNameTooLong. A version-relative
// path has no bound, as on ext4: a tree made in a directory of the mount with paths up to
// PATH_MAX, or deeper through descriptors, is taken (the store reaches its files by relative
// paths, never past PATH_MAX). Sealed versions are not checked: they are served as the store
// has them.

// checkNewName checks name, about to be made in d, and returns the errno of the refusal (and
// logs it) or 0.
func (d *openDir) checkNewName(op, name string) syscall.Errno {
	if len(name) > maxNameLen {
		return d.t.m.refuse(syscall.ENAMETOOLONG, "%s %s: a name of %d bytes (at most %d)", op, shorten(d.where(name)), len(name), maxNameLen)
	}
	rel := name
	if dir := d.Path(d.t.dir.EmbeddedInode()); dir != "" {
		rel = dir + "/" + name
	}
	if err := store.CheckPath(rel); err != nil {
		errno := toErrno(err)
		return d.t.m.refuse(errno, "%s %s: the store cannot hold this name: %v", op, shorten(d.where(name)), err)
	}
	return 0
}

// checkRootName checks a name about to be made at the root (a staging directory; version
// names are short).
func (m *mountState) checkRootName(op, name string) syscall.Errno {
	if len(name) > maxNameLen {
		return m.refuse(syscall.ENAMETOOLONG, "%s %s: a name of %d bytes (at most %d)", op, shorten(name), len(name), maxNameLen)
	}
	return 0
}

// shorten keeps log lines readable when a name or path is refused for its length.
func shorten(p string) string {
	if len(p) <= 120 {
		return p
	}
	return p[:64] + "..." + p[len(p)-48:]
}
