package main

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gpu"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
)

func cmdInit(e *env, args []string) error {
	fs := newFlags("init")
	sf := addStoreFlags(fs, false)
	shared := fs.Bool("shared", false, "let the directory's group read the store (0750/0640; default: private, 0700/0600)")
	pos, err := parse(e, fs, args, 1, 1)
	if err != nil {
		return err
	}
	var opts location.Options
	if err := sf.apply(&opts); err != nil {
		return err
	}
	if !location.IsLocal(pos[0]) && *shared {
		return usagef("--shared is for local stores; an S3 store's readers are whoever its credentials admit")
	}
	if err := location.Init(pos[0], *shared, opts); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "initialized empty weightfs store in %s\n", pos[0])
	return nil
}

// openStore opens STORE for a command, logging to stderr, with the options of the command's
// store flags if it has them. With a diff mode it selects the diff backend; closing the
// returned store releases the backend too.
func openStore(e *env, path string, readOnly bool, diffMode string, flags ...*storeFlags) (*cliStore, error) {
	opts := location.Options{Options: store.Options{ReadOnly: readOnly, Logger: e.log}}
	for _, f := range flags {
		if err := f.apply(&opts); err != nil {
			return nil, err
		}
	}
	if diffMode != "" {
		backend, err := selectDiff(e, diffMode)
		if err != nil {
			return nil, err
		}
		opts.Diff = backend
	}
	st, err := location.Open(path, opts)
	if err != nil {
		gpu.CloseBackend(opts.Diff)
		return nil, err
	}
	return &cliStore{Store: st, backend: opts.Diff}, nil
}

// openReader adds the store flags to a read-only command, parses its arguments (between min
// and max of them, STORE first) and opens STORE for reading.
func openReader(e *env, fs *flag.FlagSet, args []string, min, max int) ([]string, *cliStore, error) {
	sf := addStoreFlags(fs, true)
	pos, err := parse(e, fs, args, min, max)
	if err != nil {
		return nil, nil, err
	}
	st, err := openStore(e, pos[0], true, "", sf)
	if err != nil {
		return nil, nil, err
	}
	return pos, st, nil
}

// cliStore is an open store and the diff backend it was given; Close may be called twice.
type cliStore struct {
	*store.Store
	backend delta.DiffBackend
	closed  bool
}

func (c *cliStore) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.Store.Close()
	gpu.CloseBackend(c.backend)
	return err
}

func cmdCommit(e *env, args []string) error {
	fs := newFlags("commit")
	sf := addStoreFlags(fs, true)
	version := fs.String("version", "", "version number to create (default: latest + 1)")
	diffMode := fs.String("diff", "auto", "diff backend: auto, cpu or gpu")
	pos, err := parse(e, fs, args, 2, 2)
	if err != nil {
		return err
	}
	var v uint64
	if *version != "" {
		if v, err = parseVersionNumber(*version); err != nil {
			return usagef("--version: %v", err)
		}
	}
	st, err := openStore(e, pos[0], false, *diffMode, sf)
	if err != nil {
		return err
	}
	defer st.Close()
	p := newProgress(e, "commit")
	start := time.Now()
	info, err := st.Commit(pos[1], store.CommitOptions{Version: v, Progress: p.update})
	p.done()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "committed weight_v%06d: %d files, %s logical, %s stored (%.2f%%), %s changed, in %s\n",
		info.Number, info.Files, humanBytes(info.LogicalBytes), humanBytes(info.StoredBytes),
		percent(info.StoredBytes, info.LogicalBytes), changedText(info), time.Since(start).Round(time.Millisecond))
	return st.Close()
}

func changedText(info store.VersionInfo) string {
	if info.Anchor {
		return "all (no predecessor)"
	}
	return fmt.Sprintf("%.3f%% of elements", percent(info.ChangedElems, info.TotalElems))
}

func percent(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func cmdLog(e *env, args []string) error {
	fs := newFlags("log")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table (docs/cli.md):\n"+
		`{"versions": [{"version", "name", "created", "files", "logical_bytes", "stored_bytes", "anchor",`+"\n"+
		`"previous", "changed_elements", "total_elements", "disk_bytes"}],`+"\n"+
		`"total": {"logical_bytes", "stored_bytes", "disk_bytes", "unreferenced_bytes"}, "damaged": [N]}`)
	_, st, err := openReader(e, fs, args, 1, 1)
	if err != nil {
		return err
	}
	defer st.Close()
	// STORED is what each version's commit added; ON-DISK what it holds now (store.Usage).
	usage, err := st.Usage()
	if err != nil {
		return err
	}
	disk := map[uint64]int64{}
	for _, vu := range usage.Versions {
		disk[vu.Number] = vu.OwnBytes
	}
	if *asJSON {
		out := logJSON{Versions: []versionJSON{}, Damaged: slices.Sorted(maps.Keys(st.DamagedVersions()))}
		for _, v := range st.Versions() {
			vj := newVersionJSON(v)
			vj.DiskBytes = disk[v.Number]
			out.Versions = append(out.Versions, vj)
			out.Total.LogicalBytes += v.LogicalBytes
			out.Total.StoredBytes += v.StoredBytes
		}
		out.Total.DiskBytes, out.Total.UnreferencedBytes = usage.Total, usage.Unreferenced
		out.Damaged = nonNil(out.Damaged)
		return writeJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "VERSION\tCREATED\tFILES\tLOGICAL\tSTORED\tSTORED%\tCHANGED\tON-DISK\t")
	var logical, stored int64
	for _, v := range st.Versions() {
		changed := "anchor"
		if !v.Anchor {
			changed = fmt.Sprintf("%.3f%%", percent(v.ChangedElems, v.TotalElems))
		}
		fmt.Fprintf(tw, "weight_v%06d\t%s\t%d\t%s\t%s\t%.2f%%\t%s\t%s\t\n", v.Number, v.Created.Local().Format("2006-01-02 15:04:05"),
			v.Files, humanBytes(v.LogicalBytes), humanBytes(v.StoredBytes), percent(v.StoredBytes, v.LogicalBytes), changed, humanBytes(disk[v.Number]))
		logical += v.LogicalBytes
		stored += v.StoredBytes
	}
	if usage.Unreferenced > 0 {
		fmt.Fprintf(tw, "unreferenced\t\t\t\t\t\t\t%s\t\n", humanBytes(usage.Unreferenced))
	}
	fmt.Fprintf(tw, "total\t\t\t%s\t%s\t%.2f%%\t\t%s\t\n", humanBytes(logical), humanBytes(stored), percent(stored, logical), humanBytes(usage.Total))
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range st.Versions() { // what would make a version's patch large, or absent
		if note := st.PatchNote(v.Number); note != "" {
			fmt.Fprintf(e.stdout, "weight_v%06d  %s\n", v.Number, note)
		}
	}
	damaged := st.DamagedVersions()
	for _, v := range slices.Sorted(maps.Keys(damaged)) {
		fmt.Fprintf(e.stdout, "weight_v%06d  DAMAGED, not listed: run weightfs verify --repair %s\n", v, st.Root())
	}
	return nil
}

// parseVersionNumber accepts 43, v43, weight_v000043.
func parseVersionNumber(s string) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "weight_"), "v")
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a version number (expected e.g. 43, v43 or weight_v000043)", s)
	}
	return n, nil
}

// resolveVersion accepts a version number or "latest".
func resolveVersion(st interface{ Latest() (uint64, bool) }, s string) (uint64, error) {
	if s == "latest" {
		v, ok := st.Latest()
		if !ok {
			return 0, fmt.Errorf("the store has no sealed version yet")
		}
		return v, nil
	}
	return parseVersionNumber(s)
}

func cmdDiff(e *env, args []string) error {
	fs := newFlags("diff")
	all := fs.Bool("all", false, "list unchanged tensors too")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table (docs/cli.md), the same rows (--all too):\n"+
		`{"a", "b", "tensors": [{"file", "tensor", "dtype", "shape", "elements", "changed", "status"}],`+"\n"+
		`"total": {"changed", "elements"}}`)
	pos, st, err := openReader(e, fs, args, 3, 3)
	if err != nil {
		return err
	}
	defer st.Close()
	a, err := resolveVersion(st, pos[1])
	if err != nil {
		return err
	}
	b, err := resolveVersion(st, pos[2])
	if err != nil {
		return err
	}
	diffs, err := st.Diff(a, b)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tTENSOR\tCHANGED\tELEMENTS\tFRACTION")
	var changed, total int64
	out := diffJSON{A: a, B: b, Tensors: []tensorJSON{}}
	for _, d := range diffs {
		// Rows of whole (non-safetensors) files count bytes, not elements: they are listed
		// but stay out of the element totals.
		if d.Tensor != "" {
			changed += d.Changed
			total += d.Elements
		}
		if d.Changed == 0 && !*all && d.Status == "" {
			continue
		}
		if *asJSON {
			out.Tensors = append(out.Tensors, tensorJSON{File: d.File, Tensor: d.Tensor, DType: string(d.DType),
				Shape: nonNil(d.Shape), Elements: d.Elements, Changed: d.Changed, Status: d.Status})
			continue
		}
		frac := fmt.Sprintf("%.4f%%", percent(d.Changed, d.Elements))
		if d.Status != "" {
			frac = d.Status
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", d.File, d.Tensor, d.Changed, d.Elements, frac)
	}
	if *asJSON {
		out.Total.Changed, out.Total.Elements = changed, total
		return writeJSON(e.stdout, out)
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%.4f%%\n", changed, total, percent(changed, total))
	return tw.Flush()
}

func cmdExport(e *env, args []string) error {
	fs := newFlags("export")
	pos, st, err := openReader(e, fs, args, 3, 3)
	if err != nil {
		return err
	}
	defer st.Close()
	v, err := resolveVersion(st, pos[1])
	if err != nil {
		return err
	}
	p := newProgress(e, "export")
	err = st.Export(v, pos[2], p.update)
	p.done()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "exported weight_v%06d to %s (every file's SHA-256 checked)\n", v, pos[2])
	return nil
}

func cmdVerify(e *env, args []string) error {
	fs := newFlags("verify")
	repair := fs.Bool("repair", false, "mend damaged objects from intact copies and move what stays damaged into STORE/quarantine/ (takes the writer's lock)")
	dryRun := fs.Bool("dry-run", false, "with --repair: say what would be mended and moved, changing nothing (takes the writer's lock, to see the writer's materialized copy as the repair would)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the lines (docs/cli.md); the exit status is the same:\n"+
		`{"ok", "versions", "objects", "bytes", "damaged": [{"version", "object", "path", "error", "text"}], "quarantined": [...],`+"\n"+
		`"caches": [{"name", "path", "checked", "damaged", "note"}]}`)
	sf := addStoreFlags(fs, true)
	pos, err := parse(e, fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *dryRun && !*repair {
		return usagef("--dry-run goes with --repair")
	}
	// Repair moves files: it takes the writer's lock (and opens as the writer does). Its dry
	// run changes nothing, but opens the same way: it sees the same sources of intact
	// content (the writer's materialized copy), so it says what the repair will do.
	st, err := openStore(e, pos[0], !*repair, "", sf)
	if err != nil {
		return err
	}
	defer st.Close()
	p := newProgress(e, "verify")
	var rep store.VerifyReport
	var moved []string
	var lost []uint64
	var rr store.RepairReport
	if *repair {
		rr, err = st.RepairWith(store.RepairOptions{Progress: p.update, DryRun: *dryRun})
		rep, moved, lost = rr.Verify, rr.Moved, rr.Lost
	} else {
		rep, err = st.Verify(p.update)
	}
	p.done()
	// Packs and pack indexes (format 3): what the check found before the repair of packs
	// acted (a repair's Verify runs after it), and its notes among the others.
	packs := rep.Packs
	if *repair {
		packs = rr.Packs
	}
	rep.Notes = append(rep.Notes, packs.Notes...)
	switch {
	case !*asJSON:
		for _, d := range rep.Damaged {
			fmt.Fprintf(e.stdout, "DAMAGED %s\n", d)
		}
		for _, d := range packs.Damaged {
			fmt.Fprintf(e.stdout, "DAMAGED %s\n", d)
		}
		// An error of the check (EIO, EMFILE, EACCES, ...) is no verdict: not DAMAGED, and
		// repair acts on none.
		for _, d := range rep.Unreadable {
			fmt.Fprintf(e.stdout, "UNREADABLE %s\n", d)
		}
		would := ""
		if rr.DryRun {
			would = "WOULD BE "
		}
		for _, id := range rr.Mended {
			fmt.Fprintf(e.stdout, "%sMENDED object %s: written again from an intact copy of its content\n", would, id)
		}
		for _, id := range rr.Reanchored {
			fmt.Fprintf(e.stdout, "%sRE-ANCHORED object %s: stored whole from an intact copy (its chain is damaged)\n", would, id)
		}
		for _, v := range rr.Kept {
			fmt.Fprintf(e.stdout, "KEPT version %d: damaged objects, but a read path serves it exactly\n", v)
		}
		for _, n := range rr.PackIndexes {
			fmt.Fprintf(e.stdout, "%sREBUILT pack index %s from the packs' own tables\n", would, n)
		}
		for _, id := range rr.MendedPacks {
			fmt.Fprintf(e.stdout, "%sMENDED pack %s: written again from intact bytes (its table from its index, or its file found at another pack's name)\n", would, id)
		}
		for _, q := range rr.KeptRecords {
			fmt.Fprintf(e.stdout, "KEPT damaged record in its pack (gc rewrites the pack without it); its bytes copied to %s\n", q)
		}
		for _, m := range moved {
			fmt.Fprintf(e.stdout, "%sQUARANTINED %s\n", would, m)
		}
		for _, v := range lost {
			fmt.Fprintf(e.stdout, "%sLOST version %d: its manifest is lost (nothing to move), recorded as gone in %s\n", would, v, store.GCRecordName)
		}
	case err == nil || len(rep.Damaged) > 0 || len(rep.Unreadable) > 0 || len(packs.Damaged) > 0:
		// (An error without a finding, such as a store that cannot be read, has no report.)
		out := verifyJSON{OK: len(rep.Damaged) == 0 && len(rep.Unreadable) == 0 && len(packs.Damaged) == 0, Versions: rep.Versions, Objects: rep.Objects, Bytes: rep.Bytes,
			Damaged: []damageJSON{}, Quarantined: nonNil(moved), Lost: lost, Notes: rep.Notes, DryRun: rr.DryRun}
		addPacksJSON(&out, packs, rr)
		for _, d := range rep.Damaged {
			out.Damaged = append(out.Damaged, newDamageJSON(d))
		}
		for _, d := range rep.Unreadable {
			out.Unreadable = append(out.Unreadable, newDamageJSON(d))
		}
		for _, id := range rr.Mended {
			out.Mended = append(out.Mended, id.String())
		}
		for _, id := range rr.Reanchored {
			out.Reanchored = append(out.Reanchored, id.String())
		}
		out.Caches = []cacheJSON{}
		for _, c := range rep.Caches {
			out.Caches = append(out.Caches, cacheJSON{Name: c.Name, Path: c.Path, Checked: c.Checked, Damaged: c.Damaged, Note: c.Note})
		}
		if jerr := writeJSON(e.stdout, out); jerr != nil {
			return jerr
		}
	}
	// Node-local caches: reported after the result line, dropped when damaged, never store
	// damage (the exit status is the store's).
	printCaches := func() {
		if !*asJSON {
			for _, c := range rep.Caches {
				fmt.Fprintf(e.stdout, "cache: %s\n", c)
			}
			for _, n := range rep.Notes {
				fmt.Fprintf(e.stdout, "note: %s\n", n)
			}
		}
	}
	if err != nil {
		printCaches()
		return err
	}
	if n := len(rep.Damaged) + len(packs.Damaged); n > 0 {
		// Repaired, and said so; the exit status still tells a script that there was damage.
		printCaches()
		if rr.DryRun {
			return fmt.Errorf("verified %d versions, %d objects%s: %d damaged; --dry-run: nothing changed (the lines above say what verify --repair would do)", rep.Versions, rep.Objects, packsChecked(packs), n)
		}
		return fmt.Errorf("verified %d versions, %d objects%s: %d damaged: %d objects mended, %d re-anchored, %d versions and %d objects moved into quarantine%s; the store is consistent again",
			rep.Versions, rep.Objects, packsChecked(packs), n, len(rr.Mended), len(rr.Reanchored), len(rr.Quarantined), len(rr.QuarantinedObjects), packsRepaired(rr))
	}
	if !*asJSON {
		fmt.Fprintf(e.stdout, "verified %d versions, %d objects%s: no damage\n", rep.Versions, rep.Objects, packsChecked(packs))
	}
	printCaches()
	return st.Close()
}

// packsChecked is what verify checked of packs, for its result line ("" without packs).
func packsChecked(p store.PackReport) string {
	if p.Packs+p.Indexes == 0 {
		return ""
	}
	return fmt.Sprintf(", %d packs (%d records) and %d pack indexes", p.Packs, p.Records, p.Indexes)
}

// packsRepaired is what the repair of packs did, for the result line ("" for nothing).
func packsRepaired(rr store.RepairReport) string {
	if len(rr.PackIndexes)+len(rr.MendedPacks) == 0 {
		return ""
	}
	return fmt.Sprintf(", %d pack indexes written from the packs' tables, %d pack tables written again", len(rr.PackIndexes), len(rr.MendedPacks))
}

// addPacksJSON adds what verify found of packs, and what the repair did to them, to out.
func addPacksJSON(out *verifyJSON, p store.PackReport, rr store.RepairReport) {
	for _, d := range p.Damaged {
		j := packDamageJSON{Index: d.Index, findingJSON: findingJSON{Error: d.Err.Error(), Text: d.String()}}
		if d.Pack != (store.ID{}) {
			j.Pack = d.Pack.String()
		}
		if d.Object != (store.ID{}) {
			j.Object = d.Object.String()
		}
		out.PackDamaged = append(out.PackDamaged, j)
	}
	for _, id := range p.Orphans {
		out.OrphanPacks = append(out.OrphanPacks, id.String())
	}
	out.PackIndexes = rr.PackIndexes
	for _, id := range rr.MendedPacks {
		out.MendedPacks = append(out.MendedPacks, id.String())
	}
	out.KeptRecords = rr.KeptRecords
}

// gcOutcome says what gc did to the store's size, freed bytes (negative: it grew). A dry
// run's freed bytes are a lower bound (its re-anchoring bytes an upper bound).
func gcOutcome(freed int64, dryRun bool) string {
	const why = ": re-anchoring writes whole copies of the kept versions' deltas on dropped versions, and they take more than the drop frees"
	switch {
	case freed >= 0 && dryRun:
		return fmt.Sprintf("frees at least %s (%d bytes)", humanBytes(freed), freed)
	case freed >= 0:
		return fmt.Sprintf("the store shrank by %s (%d bytes)", humanBytes(freed), freed)
	case dryRun:
		return fmt.Sprintf("the store grows by at most %s (%d bytes)%s", humanBytes(-freed), -freed, why)
	}
	return fmt.Sprintf("the store grew by %s (%d bytes)%s", humanBytes(-freed), -freed, why)
}

func cmdGC(e *env, args []string) error {
	fs := newFlags("gc")
	sf := addStoreFlags(fs, true)
	keep := fs.Int("keep-last", 0, "number of newest versions to keep (required, at least 1)")
	every := fs.Int("keep-every", 0, "also keep every version whose number is a multiple of K (milestones)")
	dryRun := fs.Bool("dry-run", false, "say what gc would drop and free, changing nothing (needs no writer lock: works while a writer mounts the store)")
	pos, err := parse(e, fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *keep < 1 {
		return usagef("--keep-last N is required and must be at least 1")
	}
	if *every < 0 {
		return usagef("--keep-every K must not be negative")
	}
	st, err := openStore(e, pos[0], *dryRun, "", sf)
	if err != nil {
		return err
	}
	defer st.Close()
	opts := store.GCOptions{KeepEvery: *every, DryRun: *dryRun}
	if *dryRun {
		rep, err := st.GCWith(*keep, opts)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "gc --dry-run: would drop %d versions %v, keep %v (pinned by readers: %v)\n",
			rep.DroppedVersions, nonNil(rep.Dropped), nonNil(rep.Kept), nonNil(rep.Pinned))
		fmt.Fprintf(e.stdout, "gc --dry-run: would delete %d objects (%s, %d bytes), re-anchor %d objects (writing about %s of whole copies, adding at most %d bytes): %s; nothing changed\n",
			rep.DeletedObjects, humanBytes(rep.DeletedBytes), rep.DeletedBytes, rep.Reanchored, humanBytes(rep.ReanchorWritten), rep.ReanchorBytes, gcOutcome(rep.FreedBytes(), true))
		return st.Close()
	}
	p := newProgress(e, "gc: re-anchor")
	opts.Progress = p.update
	rep, err := st.GCWith(*keep, opts)
	p.done()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "gc: dropped %d versions, deleted %d objects (%s, %d bytes), re-anchored %d objects (adding %d bytes): %s\n",
		rep.DroppedVersions, rep.DeletedObjects, humanBytes(rep.DeletedBytes), rep.DeletedBytes, rep.Reanchored, rep.ReanchorBytes, gcOutcome(rep.FreedBytes(), false))
	if len(rep.Pinned) > 0 {
		fmt.Fprintf(e.stdout, "gc: kept versions %v for readers' pins\n", rep.Pinned)
	}
	return st.Close()
}
