// Package tests holds the end-to-end tests of weightfs: they build the real binaries, mount
// real FUSE filesystems under t.TempDir() and drive them with real programs (cp, sha256sum,
// ls, mmap), and check every byte by SHA-256.
package tests
