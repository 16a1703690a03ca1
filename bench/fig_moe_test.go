package main

import (
	"testing"

	"github.com/weightfs/weightfs/store/s3"
)

func TestMoEHelpers(t *testing.T) {
	body := "# HELP weightfs_fsyncs_total x\n# TYPE weightfs_fsyncs_total counter\nweightfs_fsyncs_total 1234\nweightfs_fsyncs_total_other 9\nweightfs_index_writes_total 5\n"
	if v, ok := metricValue(body, "weightfs_fsyncs_total"); !ok || v != 1234 {
		t.Errorf("weightfs_fsyncs_total = %v, %v; want 1234", v, ok)
	}
	if v, ok := metricValue(body, "weightfs_index_writes_total"); !ok || v != 5 {
		t.Errorf("weightfs_index_writes_total = %v, %v; want 5", v, ok)
	}
	if _, ok := metricValue(body, "weightfs_index"); ok {
		t.Error("a prefix of a series' name matched")
	}
	if got := moeRequestGoal(128 << 20); got != 18 {
		t.Errorf("goal for 128 MiB added: %v requests, want 18", got)
	}
	if got := moeBytesFor(20_000); got != 1_000_000_000 {
		t.Errorf("bytes for 20,000 tensors: %d, want 1 GB", got)
	}
	d := s3Delta(s3.Stats{Requests: 10, HintRequests: 4, ObjectUploadBytes: 100}, s3.Stats{Requests: 25, HintRequests: 6, ObjectUploadBytes: 300})
	if d.Requests != 15 || d.HintRequests != 2 || d.ObjectUploadBytes != 200 {
		t.Errorf("s3Delta = %+v", d)
	}
	if got := (moeS3{Reader: d}).ReaderRequests(); got != 13 {
		t.Errorf("reader requests without hint polls: %d, want 13", got)
	}
	if got := (moeLocal{Fsyncs: 7, IndexWrites: 3}).Syncs(); got != 7 {
		t.Errorf("Syncs = %d, want 7 (the index syncs nothing)", got)
	}
}

// TestMoEConfigs: the quick sizes give a MoE of at least the tensors and bytes asked, and a
// dense model of the same bytes in at most 500 tensors.
func TestMoEConfigs(t *testing.T) {
	m, n, err := moeConfig(2_500, moeBytesFor(2_500), deltaHighLR)
	if err != nil {
		t.Fatal(err)
	}
	if n < 2_500 || 2*m.ParamCount() < moeBytesFor(2_500) || m.Shards != moeShards || m.MoE.Experts != moeExperts {
		t.Errorf("MoE config %+v: %d tensors, %d bytes", m, n, 2*m.ParamCount())
	}
	d, dn, err := moeDenseConfig(2*m.ParamCount(), deltaHighLR)
	if err != nil {
		t.Fatal(err)
	}
	if dn > moeDenseMaxTensors || 2*d.ParamCount() < 2*m.ParamCount() {
		t.Errorf("dense config %+v: %d tensors, %d bytes", d, dn, 2*d.ParamCount())
	}
}

// TestMoEMountSummary: the mount's rows are the median of the versions' wall and CPU, and
// the counts of the version with the most fsyncs beyond its packs (the goal's worst case).
func TestMoEMountSummary(t *testing.T) {
	steps := []moeMountStep{
		{Version: 2, Wall: 3, CPU: 30, CPUIdle: 31, Fsyncs: 7, Packs: 1},
		{Version: 3, Wall: 1, CPU: 10, CPUIdle: 11, Fsyncs: 9, Packs: 1, Objects: 4},
		{Version: 4, Wall: 2, CPU: 20, CPUIdle: 21, Fsyncs: 10, Packs: 3}, // 7 beyond its packs
	}
	got := moeMountSummary(steps)
	if got.Wall != 2 || got.CPU != 20 || got.CPUIdle != 21 {
		t.Errorf("wall, CPU, CPU to idle = %v, %v, %v; want the medians 2, 20, 21", got.Wall, got.CPU, got.CPUIdle)
	}
	if got.Fsyncs != 9 || got.Packs != 1 || got.Objects != 4 {
		t.Errorf("counts %+v; want version 3's (9 fsyncs, 1 pack, 4 objects: 8 beyond its packs)", got)
	}
	if note := moeStepsNote(steps, 1e9, func(s moeMountStep) float64 { return s.CPU }); note != "v2 30.00, v3 10.00, v4 20.00" {
		t.Errorf("note %q", note)
	}
	if got := moeMountSummary(nil); got.Wall != 0 || got.Steps != nil {
		t.Errorf("no versions: %+v", got)
	}
}
