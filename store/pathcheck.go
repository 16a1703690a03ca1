package store

// CheckPath reports whether p can be the path of a file or directory of a version: the check
// the Writer (AddFile, AddDir, StreamFile) and the manifest reader make, so a caller that
// makes names before it hands them to a Writer (the FUSE layer, at create, mkdir and rename)
// refuses at once exactly what the seal would refuse. The error wraps ErrBadPath.
func CheckPath(p string) error { return checkPath(p) }
