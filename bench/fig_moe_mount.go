package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/weightfs/weightfs/gen"
)

// figure moe's ingest through the mount (fig_moe.go): both checkpoints' daemons run side by
// side and their versions are written in turns (dense 2, MoE 2, MoE 3, dense 3, dense 4, MoE
// 4, MoE 5, ...), so that whatever the host does to this VM over the minutes the figure takes falls on
// both; each checkpoint's cost is the median of its moeSteadyVersions versions. Issue 29 asks
// for the steady state of an RL run, a version a step, which one version alone measured
// badly: in four quiet runs of session 18, one binary's MoE version 2 cost 3.03-4.20
// CPU-s/GB and the dense one's 2.86-3.45, the two measured minutes apart.

// moeSteadyVersions is how many versions after the first the mount ingests of each
// checkpoint (versions 2 .. 1+moeSteadyVersions).
const moeSteadyVersions = 5

// moeMountStep is one version's cost through the mount.
type moeMountStep struct {
	Version             int
	Wall, CPU, CPUIdle  float64 // s: first create -> seal; daemon CPU to the seal and to idle
	Fsyncs, IndexWrites int64
	Objects, Packs      int
}

// moeMountSide is one checkpoint's store and daemon.
type moeMountSide struct {
	c       *moeCase
	root    string
	addr    string
	d       *daemon
	sampler *rssSampler
	steps   []moeMountStep
}

// moeMountSteady measures the ingest through the mount of every case (moeSources made their
// versions), in turns, and sets each case's Mount.
func (b *bench) moeMountSteady(ctx context.Context, cases []*moeCase) error {
	var sides []*moeMountSide
	defer func() {
		for _, s := range sides {
			s.sampler.Stop()
			s.d.stop()
			b.discard(s.root)
		}
	}()
	for _, c := range cases {
		s, err := b.moeMountStart(ctx, c)
		if s != nil {
			sides = append(sides, s)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", c.Kind, err)
		}
	}
	for round := range moeSteadyVersions {
		order := slices.Clone(sides)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			if err := b.moeMountVersion(ctx, s, round+2); err != nil {
				return fmt.Errorf("%s: version %d: %w", s.c.Kind, round+2, err)
			}
		}
	}
	for _, s := range sides {
		s.c.Mount = moeMountSummary(s.steps)
		if err := s.d.stop(); err != nil {
			return fmt.Errorf("%s: %w", s.c.Kind, err)
		}
	}
	return nil
}

// moeMountStart makes a fresh local store for c, mounts it and writes version 1 through it.
func (b *bench) moeMountStart(ctx context.Context, c *moeCase) (*moeMountSide, error) {
	root, mnt := filepath.Join(c.dir, "store-mount"), filepath.Join(c.dir, "mnt")
	if _, err := b.weightfsCmd(ctx, "init", root); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	d, err := b.startDaemon(ctx, "moe-"+c.Kind+"-mount", mnt, b.opts.Weightfs, "mount", "--metrics-addr", addr, root, mnt)
	if err != nil {
		b.discard(root)
		return nil, err
	}
	s := &moeMountSide{c: c, root: root, addr: addr, d: d, sampler: startRSSSampler(d.Pid(), rssInterval)}
	b.logf("  moe: %s: version 1 through the mount", c.Kind)
	v1 := filepath.Join(mnt, gen.VersionDirName(1))
	if _, err := writeTree(c.srcs[0], v1, b.opts.WriteSize, false); err != nil {
		return s, err
	}
	if _, err := seal(v1); err != nil {
		return s, err
	}
	cpu, err := readCPU(d.Pid())
	if err != nil {
		return s, err
	}
	_, _, err = waitIdle(ctx, d.Pid(), cpu, time.Now())
	return s, err
}

// moeMountVersion writes version v of s's checkpoint through its mount, measured, reading
// its store's counters from the daemon's metrics endpoint around it.
func (b *bench) moeMountVersion(ctx context.Context, s *moeMountSide, v int) error {
	before, err := s.counts()
	if err != nil {
		return err
	}
	step, err := b.writeVersion(ctx, "moe-"+s.c.Kind, s.d, v, s.c.srcs[v-1], s.sampler, 1)
	if err != nil {
		return err
	}
	after, err := s.counts()
	if err != nil {
		return err
	}
	m := moeMountStep{Version: v, Wall: step.Seconds(), CPU: step.CPU.Seconds(), CPUIdle: step.CPUToIdle.Seconds(),
		Fsyncs: after.Fsyncs - before.Fsyncs, IndexWrites: after.IndexWrites - before.IndexWrites,
		Objects: after.Objects - before.Objects, Packs: after.Packs - before.Packs}
	s.steps = append(s.steps, m)
	b.logf("  moe: %s: version %d through the mount: %d fsyncs + %d index writes; %d object files, %d packs", s.c.Kind, v, m.Fsyncs, m.IndexWrites, m.Objects, m.Packs)
	return nil
}

// counts is s's store's counters now: fsyncs and index writes (the daemon's metrics), object
// files and packs (its files).
func (s *moeMountSide) counts() (moeMountStep, error) {
	var c moeMountStep
	var err error
	if c.Fsyncs, c.IndexWrites, err = scrapeSyncs(s.addr); err != nil {
		return c, err
	}
	c.Objects, c.Packs, err = objectsAndPacks(s.root)
	return c, err
}

// moeMountSummary is the mount's row values from its versions: wall and CPU the median of
// the versions', the counts those of the version with the most fsyncs beyond its packs (the
// goal's worst case).
func moeMountSummary(steps []moeMountStep) moeLocal {
	var out moeLocal
	if len(steps) == 0 {
		return out
	}
	var wall, cpu, idle []float64
	worst := steps[0]
	for _, st := range steps {
		wall, cpu, idle = append(wall, st.Wall), append(cpu, st.CPU), append(idle, st.CPUIdle)
		if st.Fsyncs-int64(st.Packs) > worst.Fsyncs-int64(worst.Packs) {
			worst = st
		}
	}
	out.Wall, out.CPU, out.CPUIdle = median(wall), median(cpu), median(idle)
	out.Fsyncs, out.IndexWrites, out.Objects, out.Packs = worst.Fsyncs, worst.IndexWrites, worst.Objects, worst.Packs
	out.Steps = steps
	return out
}

// moeStepsNote lists the versions' values of one measure, per GB of bytes.
func moeStepsNote(steps []moeMountStep, bytes int64, value func(moeMountStep) float64) string {
	var parts []string
	for _, st := range steps {
		parts = append(parts, fmt.Sprintf("v%d %.2f", st.Version, perGB(value(st), bytes)))
	}
	return strings.Join(parts, ", ")
}
