//go:build !linux || !(amd64 || arm64)

package store

// inodeGeneration: the inode's generation number, where the kernel gives it
// (inodegen_linux.go); elsewhere none.
func inodeGeneration(string) string { return "" }
