package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/weightfs/weightfs/delta"
)

func cmdPatch(e *env, args []string) error {
	fs := newFlags("patch")
	out := fs.String("o", "", "the patch file to write (required)")
	from := fs.String("from", "", "write the catch-up patch from this earlier version (a number, weight_vNNNNNN) instead of\n"+
		"from the version before: one file taking a reader that holds it straight to VERSION")
	sf := addStoreFlags(fs, true)
	pos, err := parse(e, fs, args, 2, 2)
	if err != nil {
		return err
	}
	if *out == "" {
		return usagef("-o FILE is required")
	}
	st, err := openStore(e, pos[0], true, "", sf)
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := resolveVersion(st, pos[1])
	if err != nil {
		return err
	}
	// The mount serves patches/ only for versions with a same-layout predecessor; the CLI
	// writes exactly those files and refuses the rest with the same reason.
	write := func(w io.WriterAt) (int64, error) { return st.WritePatch(v, w) }
	base := uint64(0)
	if *from != "" {
		if base, err = parseVersionNumber(*from); err != nil {
			return usagef("--from: %v", err)
		}
		if err := st.PatchBaseFrom(v, base); err != nil {
			return err
		}
		write = func(w io.WriterAt) (int64, error) { return st.WritePatchFrom(v, base, w) }
	} else if base, err = st.PatchBase(v); err != nil {
		return err
	}
	tmp := *out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	// Progress: the bytes written of the size the manifests predict (unknown for a patch
	// against another base than the recorded one: then no bar).
	p := newProgress(e, "patch")
	var total int64 // a catch-up patch has no predicted size: the bar shows bytes and rate
	if *from == "" {
		total, _, _ = st.PatchSize(v)
	}
	n, err := write(&countingWriterAt{w: f, total: total, p: p})
	p.done()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, *out)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: patch of weight_v%06d from weight_v%06d, %s\n", *out, v, base, humanBytes(n))
	return nil
}

func cmdApply(e *env, args []string) error {
	fs := newFlags("apply")
	sync := fs.Bool("sync", false, "power-loss safe: fsync FILE after marking it, after writing the changes and after restoring it\n"+
		"(and keep the journal durably). The data fsync writes back every page holding a change: at RL\n"+
		"densities (~1% of elements) that is nearly every page, as much disk I/O as rewriting FILE.\n"+
		"Without --sync the apply is safe against the process being killed (kill -9, OOM: run the same\n"+
		"command again to finish it), because the page cache outlives the process; but until the kernel\n"+
		"writes the pages back (~30 s) a power failure or kernel crash can leave FILE neither version,\n"+
		"readable but wrong. Re-running apply detects that by hash")
	sha := fs.Bool("verify-sha256", false, "check FILE's base and result by SHA-256 even when the patch records xxh3-128\n"+
		"(xxh3 is several times faster; patches without it are always checked by SHA-256)")
	noWait := fs.Bool("no-wait", false, "fail at once, naming the holder, when another apply of FILE holds its lock\n"+
		"(FILE.weightfs-apply.lock) instead of waiting for it. Two applies of one file never interleave:\n"+
		"by default the second waits, then checks FILE as the first left it")
	pos, err := parse(e, fs, args, 2, 2)
	if err != nil {
		return err
	}
	opts := delta.ApplyOptions{Sync: *sync, VerifySHA256: *sha, NoWait: *noWait}
	opts.Waiting = func(holder string) {
		e.log.Info("waiting for another apply of "+filepath.Base(pos[1]), "holder", holder)
	}
	if fi, err := os.Stat(pos[1]); err == nil && fi.IsDir() {
		// A checkpoint directory: every file the patch names, then the directory's state.
		res, err := delta.ApplyPatchDir(pos[0], pos[1], opts)
		for _, f := range res.Files {
			fmt.Fprintf(e.stdout, "%s\n", f)
		}
		if err != nil {
			return fmt.Errorf("apply %s to directory %s: %w", pos[0], pos[1], err)
		}
		fmt.Fprintf(e.stdout, "%s: %s\n", pos[1], res)
		return nil
	}
	res, err := delta.ApplyPatchFileWith(pos[0], pos[1], opts)
	if err != nil {
		return fmt.Errorf("apply %s to %s: %w", pos[0], filepath.Base(pos[1]), err)
	}
	fmt.Fprintf(e.stdout, "%s\n", res)
	return nil
}
