package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	wfs "github.com/weightfs/weightfs/fs"
)

// The pass-through baseline: go-fuse's loopback file system over a local directory, mounted
// with the options fs/mount.go gives weightfs, so that the two differ only in what the file
// system does with the bytes. Keep these in step with fs/mount.go (mountWithFallback and
// nodeOptions).
const (
	loopbackMaxWrite      = 1 << 20 // fs/mount.go maxWrite: WRITE and READ request size
	loopbackMaxBackground = 64
	loopbackTTL           = time.Second // fs/mount.go dynamicTTL (open versions, where writes go)
)

// loopbackMountOptions mirrors weightfs's fuse.MountOptions: the same request sizes,
// readahead (also the kernel's, raised after the mount as fs.Mount does), background queue,
// xattr refusal and no splicing; mount(2) directly as root, fusermount3 otherwise.
func loopbackMountOptions(readOnly, direct bool) fuse.MountOptions {
	o := fuse.MountOptions{
		FsName:            "weightfs-bench-loopback",
		Name:              "loopback",
		MaxWrite:          loopbackMaxWrite,
		MaxReadAhead:      loopbackMaxWrite,
		MaxBackground:     loopbackMaxBackground,
		DisableXAttrs:     true,
		DisableSplice:     true,
		ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
		Logger:            log.New(io.Discard, "", 0),
	}
	if direct {
		o.DirectMountStrict = true
		o.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV
		if readOnly {
			o.DirectMountFlags |= syscall.MS_RDONLY
		}
	} else if readOnly {
		o.Options = append(o.Options, "ro")
	}
	return o
}

// mountLoopback serves dir at mnt and returns once the kernel has the mount. With
// daemonReads, its files offer no FUSE passthrough (loopback_daemon.go): every read is answered
// by the daemon.
func mountLoopback(dir, mnt string, readOnly, daemonReads bool) (*fuse.Server, error) {
	root, err := gofs.NewLoopbackRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("loopback root %s: %w", dir, err)
	}
	if daemonReads {
		root = withoutPassthrough(root)
	}
	ttl := loopbackTTL
	rawFS := gofs.NewNodeFS(root, &gofs.Options{EntryTimeout: &ttl, AttrTimeout: &ttl})
	var srv *fuse.Server
	if os.Geteuid() == 0 {
		opts := loopbackMountOptions(readOnly, true)
		srv, err = fuse.NewServer(rawFS, mnt, &opts)
	}
	if srv == nil {
		opts := loopbackMountOptions(readOnly, false)
		var herr error
		if srv, herr = fuse.NewServer(rawFS, mnt, &opts); herr != nil {
			return nil, fmt.Errorf("mount loopback at %s: %w", mnt, errors.Join(err, herr))
		}
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		_ = srv.Unmount()
		return nil, fmt.Errorf("mount loopback at %s: %w", mnt, err)
	}
	// weightfs raises the kernel's read-ahead of its mounts; so does the baseline.
	_ = wfs.SetReadAhead(mnt, wfs.ReadAheadKiB)
	return srv, nil
}

// runLoopback is `bench loopback [-read-only] SRC MNT`: serve SRC at MNT until SIGTERM or
// SIGINT (then unmount) or an external umount.
func runLoopback(args []string, stderr io.Writer) int {
	fl := flag.NewFlagSet("bench loopback", flag.ContinueOnError)
	fl.SetOutput(stderr)
	readOnly := fl.Bool("read-only", false, "mount read-only")
	daemonReads := fl.Bool("no-passthrough", false, "answer every read in the daemon (no FUSE passthrough, which the kernel uses where it can)")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: bench loopback [-read-only] SRC MNT\n\nServes the directory SRC at MNT through go-fuse's loopback file system, with weightfs's mount options.")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() != 2 {
		fl.Usage()
		return 2
	}
	src, err := filepath.Abs(fl.Arg(0))
	if err == nil {
		var st os.FileInfo
		if st, err = os.Stat(src); err == nil && !st.IsDir() {
			err = fmt.Errorf("%s is not a directory", src)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench loopback: %v\n", err)
		return 1
	}
	srv, err := mountLoopback(src, fl.Arg(1), *readOnly, *daemonReads)
	if err != nil {
		fmt.Fprintf(stderr, "bench loopback: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "bench loopback: serving %s at %s\n", src, fl.Arg(1))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if s, ok := <-sigs; ok {
			fmt.Fprintf(stderr, "bench loopback: %v: unmounting\n", s)
			if err := srv.Unmount(); err != nil {
				fmt.Fprintf(stderr, "bench loopback: unmount: %v\n", err)
			}
		}
	}()
	srv.Wait()
	signal.Stop(sigs)
	return 0
}
