package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store/s3"
)

// Figure 10 (group): a writer group (docs/format.md Part I §9). The same 2-shard checkpoint,
// versions 1 and 2, is written into an S3 store on the test server (loopback) twice: by one
// writer mount, and by two rank mounts of one group on this machine (rank 0 also
// publishes), each copying its own files (rank 0: shard 1 and the small files; rank 1: shard
// 2). Measured: version 2's time from the first write to the last DONE close returning
// (published), by 2 ranks against by 1; and each rank's upload bytes during version 2 (its
// S3 counters) against the stored bytes of the new objects its files name in version 2's
// manifest: a rank uploads its files' deltas and nothing else (its part record and open
// marker, a few kB, are the difference).

// groupBytes is the checkpoint size of the group figure: small enough for two ingests on S3
// in well under two minutes.
func groupBytes(s sizes) int64 { return min(s.IngestBytes, 256*miB) }

// groupOwner is the rank that writes a file of a 2-shard checkpoint.
func groupOwner(name string) int {
	if strings.HasPrefix(name, "model-00002-of-00002") {
		return 1
	}
	return 0
}

func (b *bench) figGroup(ctx context.Context) ([]Row, error) {
	server, err := s3ServerBinary()
	if err != nil {
		return []Row{{Figure: "10", Name: "writer group ingest", Status: StatusSkip, Note: err.Error()}}, nil
	}
	cfg, err := configForBytes(groupBytes(b.sz), deltaHighLR)
	if err != nil {
		return nil, err
	}
	cfg.Shards = 2
	dir := filepath.Join(b.work, "group")
	defer b.discard(dir)
	src := func(v int) string { return filepath.Join(dir, fmt.Sprintf("src-v%d", v)) }
	rankSrc := func(v, r int) string { return filepath.Join(dir, fmt.Sprintf("src-v%d-rank%d", v, r)) }
	for v := 1; v <= 2; v++ {
		b.logf("  group: generating version %d (%s, 2 shards)", v, describeConfig(cfg))
		if err := gen.StreamCheckpoint(cfg, v-1, src(v)); err != nil {
			return nil, fmt.Errorf("generate version %d: %w", v, err)
		}
		// Each rank's files, hard links into a directory of their own for writeTree.
		entries, err := os.ReadDir(src(v))
		if err != nil {
			return nil, err
		}
		for r := range 2 {
			os.MkdirAll(rankSrc(v, r), 0o755)
		}
		for _, e := range entries {
			if err := os.Link(filepath.Join(src(v), e.Name()), filepath.Join(rankSrc(v, groupOwner(e.Name())), e.Name())); err != nil {
				return nil, err
			}
		}
	}
	bytes2, err := treeBytes(src(2))
	if err != nil {
		return nil, err
	}
	srv, err := b.startS3Server(ctx, server, "127.0.0.1", filepath.Join(dir, "s3"))
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	defer setAWSEnv(srv)()
	s3flags := []string{"--s3-endpoint", "http://" + srv.addr, "--s3-path-style"}
	dataDir := filepath.Join(dir, "s3", "data", syncBucket)

	// One writer.
	single := "s3://" + syncBucket + "/single"
	if _, err := b.weightfsCmd(ctx, append(append([]string{"init"}, s3flags...), single)...); err != nil {
		return nil, err
	}
	mnt := filepath.Join(dir, "mnt-single")
	d, err := b.startDaemon(ctx, "group-single", mnt, b.opts.Weightfs,
		append(append([]string{"mount"}, s3flags...), "--cache-dir", filepath.Join(dir, "cache-single"), single, mnt)...)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	var singleSeconds float64
	for v := 1; v <= 2; v++ {
		if err := warmTree(src(v)); err != nil {
			return nil, err
		}
		began := time.Now()
		vdir := filepath.Join(mnt, gen.VersionDirName(v))
		if _, err := writeTree(src(v), vdir, b.opts.WriteSize, false); err != nil {
			return nil, err
		}
		if _, err := seal(vdir); err != nil {
			return nil, err
		}
		singleSeconds = time.Since(began).Seconds()
	}
	if err := d.stop(); err != nil {
		return nil, err
	}
	b.logf("  group: one writer: version 2 in %.2f s", singleSeconds)

	// Two ranks.
	group := "s3://" + syncBucket + "/group"
	if _, err := b.weightfsCmd(ctx, append(append([]string{"init"}, s3flags...), group)...); err != nil {
		return nil, err
	}
	var mnts, caches []string
	for r := range 2 {
		mnts = append(mnts, filepath.Join(dir, fmt.Sprintf("mnt-rank%d", r)))
		caches = append(caches, filepath.Join(dir, fmt.Sprintf("cache-rank%d", r)))
		args := append(append([]string{"mount"}, s3flags...), "--group", "bench", "--rank", fmt.Sprint(r), "--ranks", "2",
			"--cache-dir", caches[r])
		if r == 0 {
			args = append(args, "--publish", "--publish-poll", "20ms")
		}
		rd, err := b.startDaemon(ctx, fmt.Sprintf("group-rank%d", r), mnts[r], b.opts.Weightfs, append(args, group, mnts[r])...)
		if err != nil {
			return nil, err
		}
		defer rd.stop()
	}
	var groupSeconds float64
	var before [2]s3.Stats
	var objsV1 map[string]bool
	for v := 1; v <= 2; v++ {
		if v == 2 {
			for r := range 2 {
				if before[r], err = s3.ReadStatsFile(caches[r]); err != nil {
					return nil, err
				}
			}
			if objsV1, err = storedObjects(dataDir, "group"); err != nil {
				return nil, err
			}
		}
		if err := warmTree(src(v)); err != nil {
			return nil, err
		}
		began := time.Now()
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				vdir := filepath.Join(mnts[r], gen.VersionDirName(v))
				if _, err := writeTree(rankSrc(v, r), vdir, b.opts.WriteSize, false); err != nil {
					errs[r] = err
					return
				}
				_, errs[r] = seal(vdir)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("rank %d, version %d: %w", r, v, err)
			}
		}
		groupSeconds = time.Since(began).Seconds()
	}
	b.logf("  group: two ranks: version 2 in %.2f s", groupSeconds)
	var objects, records [2]int64
	for r := range 2 {
		after, err := s3.ReadStatsFile(caches[r])
		if err != nil {
			return nil, err
		}
		objects[r] = after.ObjectUploadBytes - before[r].ObjectUploadBytes
		records[r] = (after.UploadBytes - before[r].UploadBytes) - objects[r]
	}
	want, err := newObjectBytesByRank(dataDir, "group", 2, objsV1)
	if err != nil {
		return nil, err
	}
	rows := []Row{{Figure: "10", Name: "writer group: version 2 by 2 ranks vs by 1 writer (first write -> published)", Measured: groupSeconds, Unit: "s",
		Baseline: singleSeconds, BaselineName: "one writer mount",
		Note: fmt.Sprintf("%s (%s, 2 shards), S3 store (versitygw, loopback); both ranks and the publisher on this machine, sharing its CPUs (on two nodes each rank has its own)",
			humanBytes(bytes2), describeConfig(cfg)),
		Detail: map[string]any{"bytes": bytes2, "group_s": groupSeconds, "single_s": singleSeconds}}}
	for r := range 2 {
		rows = append(rows, Row{Figure: "10", Name: fmt.Sprintf("  rank %d: object bytes uploaded = its files' new objects", r), Measured: float64(objects[r]), Unit: "B",
			Baseline: float64(want[r]), BaselineName: "stored bytes of the new objects its files name in version 2", Goal: ratioAtMost(1),
			Note: fmt.Sprintf("objects %d B uploaded (the S3 counters of its process), %d B named; besides them %d B of records (its open marker and part record)",
				objects[r], want[r], records[r]),
			Detail: map[string]any{"object_bytes": objects[r], "want_bytes": want[r], "record_bytes": records[r]}})
		if objects[r] < want[r] {
			rows[len(rows)-1].Status = StatusError
			rows[len(rows)-1].Note += "; it uploaded less than its files' objects"
		}
	}
	return rows, nil
}

// storedObjects lists the object identities under DATA/prefix/objects/.
func storedObjects(dataDir, prefix string) (map[string]bool, error) {
	out := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(dataDir, prefix, "objects"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out[d.Name()] = true
		}
		return err
	})
	return out, err
}

// newObjectBytesByRank sums, per rank (groupOwner), the stored bytes of the objects that
// version v's manifest names for the rank's files and that were not stored before (old).
func newObjectBytesByRank(dataDir, prefix string, v int, old map[string]bool) ([2]int64, error) {
	var out [2]int64
	raw, err := os.ReadFile(filepath.Join(dataDir, prefix, "versions", gen.VersionDirName(v)[len("weight_"):]))
	if err != nil {
		return out, err
	}
	if len(raw) < 20 {
		return out, fmt.Errorf("manifest of version %d: %d bytes", v, len(raw))
	}
	var m struct {
		Files []struct {
			Path    string `json:"path"`
			ID      string `json:"id"`
			Header  string `json:"header"`
			Tensors []struct {
				ID string `json:"id"`
			} `json:"tensors"`
		} `json:"files"`
	}
	if err := json.Unmarshal(raw[16:len(raw)-4], &m); err != nil {
		return out, fmt.Errorf("manifest of version %d: %w", v, err)
	}
	seen := map[string]bool{}
	for _, f := range m.Files {
		ids := []string{f.ID, f.Header}
		for _, t := range f.Tensors {
			ids = append(ids, t.ID)
		}
		for _, id := range ids {
			if id == "" || old[id] || seen[id] {
				continue
			}
			seen[id] = true
			st, err := os.Stat(filepath.Join(dataDir, prefix, "objects", id[:2], id))
			if err != nil {
				return out, err
			}
			out[groupOwner(f.Path)] += st.Size()
		}
	}
	return out, nil
}
