package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"time"

	wfs "github.com/weightfs/weightfs/fs"
	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
)

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func copyFile(src, dst string, buf []byte) {
	in, err := os.Open(src)
	must(err)
	defer in.Close()
	out, err := os.Create(dst)
	must(err)
	_, err = io.CopyBuffer(out, in, buf)
	must(err)
	must(out.Close())
}

func main() {
	work := flag.String("work", "/var/tmp/ing", "")
	params := flag.Int64("params", 1089_000_000, "")
	prof := flag.String("prof", "/tmp/ingest.prof", "")
	tr := flag.String("trace", "", "")
	flag.Parse()
	cfg := gen.ConfigForParams(*params, 3e-6, 1)
	src := filepath.Join(*work, "src-v2")
	if _, err := os.Stat(filepath.Join(src, "DONE")); err != nil {
		os.RemoveAll(*work)
		must(gen.StreamCheckpoint(cfg, 1, src))
		must(os.WriteFile(filepath.Join(src, "DONE"), nil, 0o644))
	}
	root := filepath.Join(*work, "store")
	os.RemoveAll(root)
	must(store.Init(root))
	st, err := store.Open(root, store.Options{})
	must(err)
	mnt := filepath.Join(*work, "mnt")
	os.MkdirAll(mnt, 0o755)
	srv, err := wfs.Mount(st, mnt, wfs.Options{})
	must(err)
	defer st.Close()
	defer srv.Unmount()
	t0 := time.Now()
	must(gen.StreamCheckpoint(cfg, 0, filepath.Join(mnt, gen.VersionDirName(1))))
	must(os.WriteFile(filepath.Join(mnt, gen.VersionDirName(1), "DONE"), nil, 0o644))
	fmt.Println("v1", time.Since(t0))
	time.Sleep(3 * time.Second) // materialized copy in the background
	f, _ := os.Create(*prof)
	if *tr != "" {
		tf, _ := os.Create(*tr)
		trace.Start(tf)
	} else {
		pprof.StartCPUProfile(f)
	}
	buf := make([]byte, 4<<20)
	t0 = time.Now()
	ents, _ := os.ReadDir(src)
	dst := filepath.Join(mnt, gen.VersionDirName(2))
	must(os.Mkdir(dst, 0o755))
	var total int64
	for _, e := range ents {
		if e.Name() == "DONE" {
			continue
		}
		copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), buf)
		info, _ := e.Info()
		total += info.Size()
	}
	tw := time.Since(t0)
	must(os.WriteFile(filepath.Join(dst, "DONE"), nil, 0o644))
	d := time.Since(t0)
	if *tr != "" {
		trace.Stop()
	} else {
		pprof.StopCPUProfile()
	}
	fmt.Printf("v2 %d bytes written in %v, sealed in %v: %.0f MiB/s\n", total, tw, d, float64(total)/(1<<20)/d.Seconds())
}
