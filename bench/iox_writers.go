package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// splitByBytes deals files (relative paths, with their sizes) to n writers, largest first, each
// to the writer with the fewest bytes so far (ties: the lowest index), so that two shards of a
// checkpoint go to two writers. Each writer's files keep their sorted order.
func splitByBytes(files []string, size map[string]int64, n int) [][]string {
	n = max(n, 1)
	order := append([]string(nil), files...)
	sort.SliceStable(order, func(i, j int) bool { return size[order[i]] > size[order[j]] })
	out := make([][]string, n)
	load := make([]int64, n)
	for _, f := range order {
		w := 0
		for i := 1; i < n; i++ {
			if load[i] < load[w] {
				w = i
			}
		}
		out[w] = append(out[w], f)
		load[w] += size[f]
	}
	for _, fs := range out {
		sort.Strings(fs)
	}
	return out
}

// writeTreeConcurrent is writeTree with n writers at once, each copying its share of the files
// (splitByBytes) one after another: a trainer whose ranks save their shards in parallel. With
// n = 1 it is writeTree.
func writeTreeConcurrent(src, dst string, bufSize, n int, syncFiles bool) (writeStats, error) {
	if n <= 1 {
		return writeTree(src, dst, bufSize, syncFiles)
	}
	files, err := treeFiles(src)
	if err != nil {
		return writeStats{}, err
	}
	size := make(map[string]int64, len(files))
	for _, rel := range files {
		info, err := os.Stat(filepath.Join(src, filepath.FromSlash(rel)))
		if err != nil {
			return writeStats{}, fmt.Errorf("write tree: %w", err)
		}
		size[rel] = info.Size()
		// Directories first, by one goroutine: the writers then only create files.
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, filepath.FromSlash(rel))), 0o755); err != nil {
			return writeStats{}, fmt.Errorf("write tree: %w", err)
		}
	}
	shares := splitByBytes(files, size, n)
	st := writeStats{Start: time.Now()}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, share := range shares {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, bufSize)
			var last time.Time
			var bytes int64
			var count int
			var ferr error
			for _, rel := range share {
				k, err := copyOneFile(filepath.Join(src, filepath.FromSlash(rel)), filepath.Join(dst, filepath.FromSlash(rel)), buf, syncFiles, &last)
				bytes += k
				if err != nil {
					ferr = err
					break
				}
				count++
			}
			mu.Lock()
			defer mu.Unlock()
			st.Bytes += bytes
			st.Files += count
			if last.After(st.LastWrite) {
				st.LastWrite = last
			}
			if ferr != nil {
				errs = append(errs, ferr)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return st, errs[0]
	}
	if syncFiles {
		dirs := map[string]bool{}
		for _, rel := range files {
			dirs[filepath.Dir(filepath.Join(dst, filepath.FromSlash(rel)))] = true
		}
		for dir := range dirs {
			if err := syncDir(dir); err != nil {
				return st, err
			}
		}
	}
	st.End = time.Now()
	return st, nil
}
