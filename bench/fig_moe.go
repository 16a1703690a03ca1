package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store/s3"
)

// Figure 13 (moe): issue 29's "What must show it". A mixture-of-experts checkpoint
// (Qwen3-MoE naming, `model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight`, 128 experts,
// top-8, 8 shards: gen's --experts 128 --top-k 8) of at least 20,000 tensors and 1 GB,
// against a dense checkpoint of the same bytes in at most 500 tensors, both at lr 3e-6;
// version 2 (one RL step on) is measured against version 1 in each case (fig_moe_run.go),
// and through the mount versions 2-6 too, each on the one before (fig_moe_mount.go):
//   - ingest through the read-write mount of a `weightfs mount` daemon (fig_ingest.go's
//     writeVersion: first create -> DONE closed, the daemon's CPU to the seal and until it is
//     idle again; the median of versions 2-6, the two checkpoints' versions written in
//     turns), and `weightfs commit` (store.Commit, in this process): wall and CPU per GB,
//     MoE at most 1.3x dense;
//   - on the local store of each, the fsyncs a version cost: the store's Stats.Fsyncs (the
//     mount's from its metrics endpoint; the node-local index is opened without fsyncs, as
//     the derived cache it is, so its writes, Stats.IndexWrites, are printed but cost none),
//     at most 8 + the packs the version added (files under
//     STORE/packs; none before packs, so the goal is 8 and the new object files are printed);
//   - on S3 (the test server), the requests the writer mount sent for version 2 (first create
//     -> seal) and those a read-only mount sent to catch up with it (seal -> every file of
//     the version read through it, its polls of the change hint left out and printed apart),
//     each at most 16 + (bytes the version added) / 64 MiB;
//   - seal -> the read-only S3 mount's `latest` names version 2: MoE at most 1.5x dense.
// Ratios are against the dense checkpoint measured in the same run.

const (
	moeIssueTensors    = 20_000
	moeIssueBytes      = 1_000_000_000 // "at least 1 GB" with 20,000 tensors
	moeMinTensors      = 500
	moeExperts         = 128
	moeTopK            = 8
	moeShards          = 8
	moeDenseMaxTensors = 500
	moeCostSlack       = 1.3 // ingest and commit, per GB: MoE / dense
	moeShowSlack       = 1.5 // seal -> a read-only S3 mount shows it: MoE / dense
	moeFsyncBase       = 8   // fsyncs per version: at most this + packs
	moeRequestBase     = 16  // S3 requests per version: at most this + bytes / moeRequestUnit
	moeRequestUnit     = 64 << 20
)

// moeBytesFor is the bytes of figure moe's checkpoints with tensors tensors: the issue's
// ratio (1 GB for 20,000).
func moeBytesFor(tensors int) int64 {
	return int64(tensors) * moeIssueBytes / moeIssueTensors
}

// moeRequestGoal is the most S3 requests a version that added bytes may cost (issue 29).
func moeRequestGoal(bytes int64) float64 {
	return moeRequestBase + float64(bytes)/moeRequestUnit
}

// moeConfig is the MoE model (128 experts, top-8, 8 shards) with at least tensors tensors
// and bytes bytes of bf16 weights: the fewest layers that reach the tensor count, with the
// experts' width fitted to the bytes.
func moeConfig(tensors int, bytes int64, lr float64) (gen.Config, int, error) {
	params := bytes / 2
	for range 100 {
		var c gen.Config
		n := 0
		for layers := 1; layers <= 10_000 && n < tensors; layers++ {
			c = gen.MoEConfigForParams(params, layers, gen.MoE{Experts: moeExperts, TopK: moeTopK}, lr, 1)
			c.Shards = moeShards
			ts, err := c.Tensors()
			if err != nil {
				return c, 0, fmt.Errorf("MoE config of %d layers for %d bytes: %w", layers, bytes, err)
			}
			n = len(ts)
		}
		if n < tensors {
			return c, n, fmt.Errorf("no MoE config of %d bytes reaches %d tensors", bytes, tensors)
		}
		if 2*c.ParamCount() >= bytes {
			return c, n, nil
		}
		params += params/50 + 1
	}
	return gen.Config{}, 0, fmt.Errorf("no MoE config of %d tensors reaches %d bytes", tensors, bytes)
}

// moeDenseConfig is the dense model of at least bytes bytes, in moeShards shards.
func moeDenseConfig(bytes int64, lr float64) (gen.Config, int, error) {
	c, err := configForBytes(bytes, lr)
	if err != nil {
		return c, 0, err
	}
	c.Shards = moeShards
	ts, err := c.Tensors()
	if err != nil {
		return c, 0, err
	}
	if len(ts) > moeDenseMaxTensors {
		return c, len(ts), fmt.Errorf("the dense model of %d bytes has %d tensors, more than %d", bytes, len(ts), moeDenseMaxTensors)
	}
	return c, len(ts), nil
}

// moeLocal is what version 2 cost on a local store, through the mount or by commit.
type moeLocal struct {
	Wall, CPU float64 // s: first create -> seal (mount), the Commit call (commit)
	CPUIdle   float64 // mount: the daemon's CPU from the first create until it is idle again
	// Fsyncs and IndexWrites are the growth of the store's Stats over the version.
	Fsyncs, IndexWrites int64
	Objects, Packs      int // files the version added under STORE/objects and STORE/packs
	// Steps is each version's cost through the mount (the values above: the median's, and
	// the counts of the version with the most fsyncs beyond its packs); none for commit.
	Steps []moeMountStep `json:",omitempty"`
}

// Syncs is the fsyncs the version cost: the store's own and bbolt's two per index write.
func (l moeLocal) Syncs() int64 { return l.Fsyncs }

// moeS3 is what version 2 cost on S3.
type moeS3 struct {
	Writer     s3.Stats // the writer mount's counters, first create -> seal
	Show       s3.Stats // the reader mount's, seal -> its latest names version 2
	Reader     s3.Stats // the reader mount's, seal -> every file of version 2 read through it
	SealToShow float64  // s
	Objects    int      // object files the version added in the bucket
	Packs      int      // pack files
	Skipped    string   // why S3 was not measured ("": it was)
	Failed     string   // the error that stopped its measurement ("": none)
}

// ReaderRequests is the reader's catch-up requests, its polls of the change hint left out.
func (s moeS3) ReaderRequests() int64 { return s.Reader.Requests - s.Reader.HintRequests }

// moeCase is one checkpoint's measurements.
type moeCase struct {
	Kind    string // "MoE" or "dense"
	Cfg     gen.Config
	Tensors int
	Bytes   int64    // version 2's files
	Mount   moeLocal // the median of versions 2 .. 1+moeSteadyVersions (fig_moe_mount.go)
	Commit  moeLocal
	S3      moeS3

	dir     string   // the case's work directory
	srcs    []string // versions 1 .. 1+moeSteadyVersions
	hashes2 map[string]xxh3.Uint128
}

// s3Delta is the growth of the counters the figure reads from a to b.
func s3Delta(a, b s3.Stats) s3.Stats {
	return s3.Stats{
		Requests: b.Requests - a.Requests, ResponseBytes: b.ResponseBytes - a.ResponseBytes,
		ObjectDownloads: b.ObjectDownloads - a.ObjectDownloads, ObjectBytes: b.ObjectBytes - a.ObjectBytes,
		ManifestDownloads: b.ManifestDownloads - a.ManifestDownloads, ManifestBytes: b.ManifestBytes - a.ManifestBytes,
		Uploads: b.Uploads - a.Uploads, UploadBytes: b.UploadBytes - a.UploadBytes,
		MultipartUploads: b.MultipartUploads - a.MultipartUploads,
		ObjectUploads:    b.ObjectUploads - a.ObjectUploads, ObjectUploadBytes: b.ObjectUploadBytes - a.ObjectUploadBytes,
		Retries: b.Retries - a.Retries, Failures: b.Failures - a.Failures,
		HintRequests: b.HintRequests - a.HintRequests, HintChanges: b.HintChanges - a.HintChanges,
	}
}

// metricValue is the value of the unlabelled series name in a Prometheus text exposition.
func metricValue(body, name string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		return v, err == nil
	}
	return 0, false
}

func (b *bench) figMoE(ctx context.Context) ([]Row, error) {
	lr := deltaHighLR
	mcfg, mn, err := moeConfig(b.sz.MoETensors, b.sz.MoEBytes, lr)
	if err != nil {
		return nil, err
	}
	dcfg, dn, err := moeDenseConfig(2*mcfg.ParamCount(), lr)
	if err != nil {
		return nil, err
	}
	var srv *s3Server
	skipS3 := ""
	if bin, err := s3ServerBinary(); err != nil {
		skipS3 = err.Error()
	} else {
		if srv, err = b.startS3Server(ctx, bin, "127.0.0.1", filepath.Join(b.work, "moe-s3")); err != nil {
			return nil, err
		}
		defer b.discard(filepath.Join(b.work, "moe-s3"))
		defer srv.stop()
		defer setAWSEnv(srv)()
	}
	cases := []*moeCase{{Kind: "dense", Cfg: dcfg, Tensors: dn}, {Kind: "MoE", Cfg: mcfg, Tensors: mn}}
	for _, c := range cases {
		c.S3.Skipped = skipS3
		err := b.moeSources(ctx, c)
		if c.dir != "" {
			defer b.discard(c.dir)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Kind, err)
		}
	}
	for _, c := range cases {
		if c.Commit, err = b.moeCommit(c.dir, c.Kind, c.firstTwo()); err != nil {
			return nil, fmt.Errorf("%s: commit: %w", c.Kind, err)
		}
	}
	if err := b.moeMountSteady(ctx, cases); err != nil {
		return nil, fmt.Errorf("through the mount: %w", err)
	}
	for _, c := range cases {
		if srv == nil {
			continue
		}
		if c.S3, err = b.moeS3(ctx, c.dir, c.Kind, srv, c.firstTwo(), c.hashes2); err != nil {
			// The local rows stand without S3's.
			b.logf("  moe: %s: on S3: %v", c.Kind, err)
			c.S3 = moeS3{Failed: err.Error()}
		}
	}
	return moeRows(cases[1], cases[0]), nil
}

// perGB is seconds per GB (10^9 bytes).
func perGB(seconds float64, bytes int64) float64 { return seconds / (float64(bytes) / 1e9) }

// moeRows are the figure's rows: MoE (m) against dense (d).
func moeRows(m, d *moeCase) []Row {
	const fig = "13"
	row := func(name string, mv, dv float64, unit string, goal *Goal, note string) Row {
		return Row{Figure: fig, Name: name, Measured: mv, Unit: unit, Baseline: dv, BaselineName: "dense, same run", Goal: goal, Note: note}
	}
	rows := []Row{{Figure: fig, Name: fmt.Sprintf("moe: MoE of %d tensors vs dense of %d, %s each, %d shards, each version on the one before", m.Tensors, d.Tensors, humanBytes(m.Bytes), moeShards),
		Measured: float64(m.Tensors), Unit: "tensors", Baseline: float64(d.Tensors), BaselineName: "dense tensors",
		Note: fmt.Sprintf("MoE: %d layers, %d experts (width %d), top-%d, %s; dense: %d layers, hidden %d, %s; bytes %d and %d",
			m.Cfg.Layers, m.Cfg.MoE.Experts, m.Cfg.MoE.ExpertIntermediate, m.Cfg.MoE.TopK, describeConfig(m.Cfg),
			d.Cfg.Layers, d.Cfg.Hidden, describeConfig(d.Cfg), m.Bytes, d.Bytes),
		Detail: map[string]any{"moe": m, "dense": d}},
		row(fmt.Sprintf("  ingest through the mount, first create -> seal: wall per GB (median of versions 2-%d, written in turns)", 1+moeSteadyVersions),
			perGB(m.Mount.Wall, m.Bytes), perGB(d.Mount.Wall, d.Bytes), "s/GB", ratioAtMost(moeCostSlack),
			fmt.Sprintf("MoE %s; dense %s s/GB", moeStepsNote(m.Mount.Steps, m.Bytes, func(s moeMountStep) float64 { return s.Wall }),
				moeStepsNote(d.Mount.Steps, d.Bytes, func(s moeMountStep) float64 { return s.Wall }))),
		row("  ingest: daemon CPU per GB, first create -> idle again (median of the same versions)", perGB(m.Mount.CPUIdle, m.Bytes), perGB(d.Mount.CPUIdle, d.Bytes), "CPU-s/GB", ratioAtMost(moeCostSlack),
			fmt.Sprintf("MoE %s; dense %s CPU-s/GB; to the seal (median): MoE %.2f, dense %.2f",
				moeStepsNote(m.Mount.Steps, m.Bytes, func(s moeMountStep) float64 { return s.CPUIdle }),
				moeStepsNote(d.Mount.Steps, d.Bytes, func(s moeMountStep) float64 { return s.CPUIdle }),
				perGB(m.Mount.CPU, m.Bytes), perGB(d.Mount.CPU, d.Bytes))),
		row("  weightfs commit (store.Commit, in the bench's process): wall per GB", perGB(m.Commit.Wall, m.Bytes), perGB(d.Commit.Wall, d.Bytes), "s/GB", ratioAtMost(moeCostSlack),
			fmt.Sprintf("MoE %.2f s, dense %.2f s", m.Commit.Wall, d.Commit.Wall)),
		row("  commit: CPU per GB", perGB(m.Commit.CPU, m.Bytes), perGB(d.Commit.CPU, d.Bytes), "CPU-s/GB", ratioAtMost(moeCostSlack), ""),
	}
	for _, c := range []*moeCase{m, d} {
		for _, l := range []struct {
			how string
			v   moeLocal
		}{{"through the mount", c.Mount}, {"by commit", c.Commit}} {
			packs := "packs: none (before packs; the goal is 8)"
			if l.v.Packs > 0 {
				packs = fmt.Sprintf("packs %d", l.v.Packs)
			}
			how := l.how
			if len(l.v.Steps) > 1 {
				how += fmt.Sprintf(" (the worst of versions 2-%d)", 1+moeSteadyVersions)
			}
			rows = append(rows, Row{Figure: fig, Name: fmt.Sprintf("  local store, %s, %s: fsyncs per version", c.Kind, how),
				Measured: float64(l.v.Syncs()), Unit: "fsyncs", Goal: atMost(float64(moeFsyncBase+l.v.Packs), "fsyncs"),
				Note: fmt.Sprintf("store Fsyncs %d (and %d writes of the index, which syncs nothing); %s; %d new object files", l.v.Fsyncs, l.v.IndexWrites, packs, l.v.Objects)})
		}
	}
	if m.S3.Skipped != "" {
		return append(rows, Row{Figure: fig, Name: "  S3: requests per version, seal -> a read-only mount shows it", Status: StatusSkip, Note: m.S3.Skipped})
	}
	if m.S3.Failed != "" || d.S3.Failed != "" {
		return append(rows, Row{Figure: fig, Name: "  S3: requests per version, seal -> a read-only mount shows it", Status: StatusError,
			Note: joinNote(joinNote("", d.S3.Failed), m.S3.Failed)})
	}
	for _, c := range []*moeCase{m, d} {
		s := c.S3
		added := s.Writer.ObjectUploadBytes
		goal := atMost(math.Floor(moeRequestGoal(added)), "requests")
		rows = append(rows,
			Row{Figure: fig, Name: fmt.Sprintf("  S3, %s: requests the writer mount sent for the version (first create -> seal)", c.Kind),
				Measured: float64(s.Writer.Requests), Unit: "requests", Goal: goal,
				Note: fmt.Sprintf("%s of objects added (%d object uploads, %d multipart; %d object files, %d packs in the bucket); goal 16 + bytes/64 MiB",
					humanBytes(added), s.Writer.ObjectUploads, s.Writer.MultipartUploads, s.Objects, s.Packs)},
			Row{Figure: fig, Name: fmt.Sprintf("  S3, %s: requests a read-only mount sent to catch up (seal -> version read whole)", c.Kind),
				Measured: float64(s.ReaderRequests()), Unit: "requests", Goal: goal,
				Note: fmt.Sprintf("%d object downloads (%s), %d manifests; until its latest named the version %d requests; besides them %d polls of the change hint (250 ms apart)",
					s.Reader.ObjectDownloads, humanBytes(s.Reader.ObjectBytes), s.Reader.ManifestDownloads, s.Show.Requests-s.Show.HintRequests, s.Reader.HintRequests)})
	}
	rows = append(rows, row("  seal -> a read-only S3 mount shows the version", m.S3.SealToShow, d.S3.SealToShow, "s", ratioAtMost(moeShowSlack), ""))
	return rows
}
