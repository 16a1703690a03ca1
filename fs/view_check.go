package fs

import gofs "github.com/hanwen/go-fuse/v2/fs"

// The interfaces the nodes of patches/ and deltas/ implement; the compiler checks the list.
// (emptyView's are in api_check.go.)

var (
	_ = (viewNode)((*patchesView)(nil))
	_ = (viewNode)((*deltasView)(nil))
	_ = (viewNode)((*emptyView)(nil))

	_ = (gofs.NodeGetattrer)((*viewDir)(nil))
	_ = (gofs.NodeSetattrer)((*viewDir)(nil))
	_ = (gofs.NodeStatfser)((*viewDir)(nil))
	_ = (gofs.NodeFsyncer)((*viewDir)(nil))
	_ = (gofs.NodeMkdirer)((*viewDir)(nil))
	_ = (gofs.NodeCreater)((*viewDir)(nil))
	_ = (gofs.NodeMknoder)((*viewDir)(nil))
	_ = (gofs.NodeSymlinker)((*viewDir)(nil))
	_ = (gofs.NodeLinker)((*viewDir)(nil))
	_ = (gofs.NodeUnlinker)((*viewDir)(nil))
	_ = (gofs.NodeRmdirer)((*viewDir)(nil))
	_ = (gofs.NodeRenamer)((*viewDir)(nil))

	_ = (gofs.NodeLookuper)((*patchesView)(nil))
	_ = (gofs.NodeReaddirer)((*patchesView)(nil))
	_ = (gofs.NodeLookuper)((*deltasView)(nil))
	_ = (gofs.NodeReaddirer)((*deltasView)(nil))
	_ = (gofs.NodeGetattrer)((*deltaDir)(nil))
	_ = (gofs.NodeLookuper)((*deltaDir)(nil))
	_ = (gofs.NodeReaddirer)((*deltaDir)(nil))
	_ = (gofs.NodeMkdirer)((*deltaDir)(nil))
	_ = (gofs.NodeUnlinker)((*deltaDir)(nil))

	_ = (gofs.NodeGetattrer)((*viewFile)(nil))
	_ = (gofs.NodeSetattrer)((*viewFile)(nil))
	_ = (gofs.NodeOpener)((*viewFile)(nil))
	_ = (gofs.NodeReader)((*viewFile)(nil))
	_ = (gofs.NodeReleaser)((*viewFile)(nil))
	_ = (gofs.NodeStatfser)((*viewFile)(nil))
	_ = (gofs.NodeFsyncer)((*viewFile)(nil))
)
