//go:build linux && (amd64 || arm64)

package store

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fsIocGetVersion is FS_IOC_GETVERSION of linux/fs.h, _IOR('v', 1, long), on amd64 and arm64.
const fsIocGetVersion = 0x80087601

// inodeGeneration returns the file system's generation number of the inode of the file at
// path, which ext4 and XFS draw at random when the inode is made: a copy of the file
// gets another one, whatever times it keeps. "" where the file system has none.
func inodeGeneration(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	g, err := unix.IoctlGetUint32(int(f.Fd()), fsIocGetVersion)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%x", g)
}
