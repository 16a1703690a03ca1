package main

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// go-fuse's loopback hands the kernel each open file's descriptor (FUSE passthrough, Linux 6.9
// and root), and the kernel then reads the underlying file itself: the daemon is not in the
// data path at all. That is the fastest a FUSE mount can be, but no daemon that looks at the
// bytes can do it. withoutPassthrough makes the loopback answer every read itself (a pread
// into a buffer and a write to /dev/fuse), the same work weightfs does short of its checks:
// the reads figure measures both (docs/benchmarks.md, figure 4).

// withoutPassthrough returns the loopback root with every node wrapped so that its open files
// offer no passthrough.
func withoutPassthrough(root gofs.InodeEmbedder) gofs.InodeEmbedder {
	if ln, ok := root.(*gofs.LoopbackNode); ok {
		return &daemonReadNode{ln}
	}
	return root
}

// daemonReadNode is a loopback node whose open files are daemonReadFiles, and whose children
// are daemonReadNodes.
type daemonReadNode struct{ *gofs.LoopbackNode }

var _ = (gofs.NodeWrapChilder)((*daemonReadNode)(nil))

func (n *daemonReadNode) WrapChild(ctx context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder {
	return withoutPassthrough(ops)
}

var _ = (gofs.NodeOpener)((*daemonReadNode)(nil))

func (n *daemonReadNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	lf, ok := fh.(*gofs.LoopbackFile)
	if !ok {
		return fh, fl, 0
	}
	return &daemonReadFile{lf}, fl, 0
}

// daemonReadFile is a loopback file without passthrough: its PassthroughFd has another
// signature than go-fuse's FilePassthroughFder asks for, so go-fuse does not find one and
// sends every read to the daemon. Everything else is the loopback file's.
type daemonReadFile struct{ *gofs.LoopbackFile }

// PassthroughFd hides the loopback file's (see daemonReadFile).
func (f *daemonReadFile) PassthroughFd() {}

var (
	_ = (gofs.FileReader)((*daemonReadFile)(nil))
	_ = (gofs.FileGetattrer)((*daemonReadFile)(nil))
)

// hasPassthrough reports whether fh offers the kernel a descriptor to read itself.
func hasPassthrough(fh gofs.FileHandle) bool {
	_, ok := fh.(gofs.FilePassthroughFder)
	return ok
}
