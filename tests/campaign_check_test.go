package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

// campaignCrashed says whether a command's output shows a Go runtime crash (an unrecovered
// panic or a fatal error) or it died of a signal.
func campaignCrashed(code int, out string) bool {
	return code < 0 || strings.Contains(out, "fatal error: ") ||
		(strings.Contains(out, "panic: ") && strings.Contains(out, "goroutine ")) ||
		strings.Contains(out, " [running]:")
}

// campaignTail is the end of a long output, for failure messages.
func campaignTail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return strings.ReplaceAll(s, "\n", "\n\t\t")
}

// campaignCrashExcerpt is the part of a crashed command's output that says why: from the panic or
// fatal error on, through the first goroutine's stack.
func campaignCrashExcerpt(out string) string {
	i := strings.Index(out, "panic: ")
	if j := strings.Index(out, "fatal error: "); i < 0 || (j >= 0 && j < i) {
		i = j
	}
	if i < 0 {
		return campaignTail(out, 3000)
	}
	out = out[i:]
	// The first goroutine's stack is the crashing one; the others are noise here.
	if r := strings.Index(out, "[running]:"); r >= 0 {
		if end := strings.Index(out[r:], "\n\ngoroutine "); end >= 0 {
			out = out[:r+end]
		}
	}
	if len(out) > 3000 {
		out = out[:3000] + "..."
	}
	return strings.ReplaceAll(strings.TrimSpace(out), "\n", "\n\t\t")
}

// campaignStackExcerpt is the goroutines of a command stopped with SIGQUIT that run weightfs code.
func campaignStackExcerpt(out string) string {
	var keep []string
	for _, g := range strings.Split(out, "\n\n") {
		if strings.Contains(g, "weightfs/weightfs/") && strings.HasPrefix(g, "goroutine ") {
			keep = append(keep, g)
		}
	}
	if len(keep) == 0 {
		return campaignTail(out, 3000)
	}
	s := strings.Join(keep, "\n\n")
	if len(s) > 4000 {
		s = s[:4000] + "..."
	}
	return strings.ReplaceAll(s, "\n", "\n\t\t")
}

// formatNamed matches output that names the format file or its failure.
var formatNamed = regexp.MustCompile(`(?i)weightfs-store|format|not a weightfs store`)

// cacheNamed matches output that attributes a finding to a node-local cache (verify may check
// them and say so: docs/format.md §8).
var cacheNamed = regexp.MustCompile(`(?i)cache|materiali[sz]ed|index\.db|\bthe index\b|render`)

// storeDamageLines are verify's DAMAGED lines that do not name a node-local cache.
func storeDamageLines(stdout string) []string {
	var lines []string
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(l, "DAMAGED ") && !cacheNamed.MatchString(l) {
			lines = append(lines, l)
		}
	}
	return lines
}

// checkVerify runs `weightfs verify STORE`: store damage must make it fail naming what is
// damaged; cache damage must not be reported as damage of the store; it must never crash.
func (tr *campaignTrial) checkVerify() {
	r := tr.runCLI("verify", tr.storeDir)
	out := r.stdout + r.stderr
	tr.noted("verify exit %d", r.code)
	if r.hung {
		tr.fail("verify", "hung", "no exit in %v; its goroutines:\n\t\t%s", campaignCLITimeout, campaignStackExcerpt(out))
		return
	}
	if campaignCrashed(r.code, out) {
		tr.fail("verify", "crash", "exit %d:\n\t\t%s", r.code, campaignCrashExcerpt(out))
		return
	}
	switch {
	case tr.kind.cache:
		if lines := storeDamageLines(r.stdout); len(lines) > 0 {
			tr.fail("verify", "false store damage", "only a cache was damaged, verify reported the store:\n\t\t%s", campaignTail(strings.Join(lines, "\n"), 2000))
		} else if r.code != 0 && !cacheNamed.MatchString(out) {
			tr.fail("verify", "failed on cache damage", "exit %d without naming a cache:\n\t\t%s", r.code, campaignTail(out, 2000))
		}
	case tr.kind.name == "object":
		if r.code == 0 {
			tr.fail("verify", "missed damage", "exit 0:\n\t\t%s", campaignTail(out, 1000))
		} else if !strings.Contains(out, tr.object) {
			tr.fail("verify", "damage not named", "exit %d without naming object %s:\n\t\t%s", r.code, tr.object, campaignTail(out, 2000))
		}
	case tr.campaignIsPackKind():
		tr.checkVerifyPacks(r.code, out)
	case tr.kind.name == "manifest":
		if tr.latestManifestDeleted() {
			return // indistinguishable from a seal that never happened
		}
		if r.code == 0 {
			tr.fail("verify", "missed damage", "exit 0:\n\t\t%s", campaignTail(out, 1000))
		} else if !campaignNamesVersion(out, tr.manifest) {
			tr.fail("verify", "damage not named", "exit %d without naming version %d:\n\t\t%s", r.code, tr.manifest, campaignTail(out, 2000))
		}
	case tr.kind.name == "format":
		if r.code == 0 {
			tr.fail("verify", "missed damage", "exit 0:\n\t\t%s", campaignTail(out, 1000))
		} else if !formatNamed.MatchString(out) {
			tr.fail("verify", "damage not named", "exit %d without naming the format file:\n\t\t%s", r.code, campaignTail(out, 2000))
		}
	}
}

// checkExports exports every version: each export writes exactly the version's bytes or
// fails, and never leaves a wrong file. Exports that the damage cannot explain must succeed.
func (tr *campaignTrial) checkExports() {
	var failed []string
	for v := 1; v <= campaignVersions; v++ {
		out := filepath.Join(tr.work, fmt.Sprintf("export-v%d", v))
		r := tr.runCLI("export", tr.storeDir, fmt.Sprint(v), out)
		msg := r.stdout + r.stderr
		what := fmt.Sprintf("export v%d", v)
		if r.hung {
			tr.fail("export", "hung", "%s: no exit in %v; its goroutines:\n\t\t%s", what, campaignCLITimeout, campaignStackExcerpt(msg))
			os.RemoveAll(out)
			failed = append(failed, fmt.Sprint(v))
			continue
		}
		if campaignCrashed(r.code, msg) {
			tr.fail("export", "crash", "%s: exit %d:\n\t\t%s", what, r.code, campaignCrashExcerpt(msg))
			continue
		}
		got := map[string]string{}
		if _, err := os.Stat(out); err == nil {
			got = treeHashes(tr.t, out)
		}
		names := make([]string, 0, len(got))
		for f := range got {
			names = append(names, f)
		}
		sort.Strings(names)
		for _, f := range names {
			if w, ok := tr.c.want[v][f]; !ok {
				tr.fail("export", "wrong file", "%s (exit %d) left %s, which the version does not have", what, r.code, f)
			} else if got[f] != w {
				tr.fail("export", "wrong bytes", "%s (exit %d) wrote %s with SHA-256 %s, want %s", what, r.code, f, got[f], w)
			}
		}
		if r.code == 0 {
			if len(got) != len(tr.c.want[v]) {
				tr.fail("export", "incomplete", "%s exited 0 with %d of %d files", what, len(got), len(tr.c.want[v]))
			} else {
				tr.exactBefore[v] = true // (a wrong byte failed the trial above)
			}
			if tr.kind.name == "format" {
				tr.fail("export", "damaged format accepted", "%s exited 0", what)
			}
			continue
		}
		failed = append(failed, fmt.Sprint(v))
		switch {
		case tr.kind.cache:
			tr.fail("export", "failed on cache damage", "%s: exit %d:\n\t\t%s", what, r.code, campaignTail(msg, 1500))
		case tr.kind.name == "manifest" && v != tr.manifest:
			tr.fail("export", "intact version unreadable", "%s: exit %d although only v%d's manifest is damaged:\n\t\t%s", what, r.code, tr.manifest, campaignTail(msg, 1500))
		}
		os.RemoveAll(out)
	}
	tr.noted("export failed for [%s]", strings.Join(failed, " "))
}

// campaignReadTimeout bounds one mount's reads (a few seconds when all is well).
const campaignReadTimeout = 2 * time.Minute

// campaignReads counts a mount's reads by outcome.
type campaignReads struct{ ok, eio, skipped int }

// checkMount mounts the damaged store (phase "ro" or "rw" with flags), reads every file of
// every version, the latest link and every file of patches/ and deltas/, and stops the
// daemon. Reads must return the right bytes or EIO; the daemon must live to the end.
func (tr *campaignTrial) checkMount(phase string, flags ...string) {
	mnt := filepath.Join(tr.work, "mnt-"+phase)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		tr.t.Fatal(err)
	}
	tr.deadRead = ""
	d, err := campaignMount(tr.t, tr.storeDir, mnt, flags...)
	if err != nil {
		out := ""
		if d != nil {
			out = d.out.String()
		}
		switch {
		case campaignCrashed(0, out):
			tr.fail(phase, "crash", "the daemon crashed while mounting: %v\n\t\t%s", err, campaignCrashExcerpt(out))
		case tr.kind.name == "format":
			tr.noted("%s: refused to mount", phase)
		default:
			tr.fail(phase, "mount refused", "%v\n\t\t%s", err, campaignTail(out, 1500))
		}
		return
	}
	if tr.kind.name == "format" {
		tr.fail(phase, "damaged format accepted", "the mount started")
	}
	var st campaignReads
	done := make(chan struct{})
	go func() {
		defer close(done)
		st = tr.readMount(phase, mnt, d)
		if phase == "rw" && tr.deadRead == "" {
			tr.checkSeal(mnt, &st)
		}
	}()
	hungReads := false
	select {
	case <-done:
	case <-time.After(campaignReadTimeout):
		hungReads = true
		// A read that never returns: kill the daemon, which fails the blocked reads.
		tr.fail(phase, "hung", "reads did not finish in %v", campaignReadTimeout)
		d.kill9()
		if isMounted(mnt) {
			_ = syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
		<-done
	}
	res := d.campaignStop()
	out := d.out.String()
	switch {
	case hungReads:
	case res.diedEarly, res.notServing, tr.deadRead != "":
		how := fmt.Sprintf("the daemon exited (status %d) while serving", res.code)
		if !res.diedEarly {
			how = "the mount stopped answering while the daemon ran"
		}
		why := campaignTail(out, 3000)
		if campaignCrashed(res.code, out) {
			why = campaignCrashExcerpt(out)
		}
		tr.fail(phase, "daemon died", "%s (first noticed by %s):\n\t\t%s", how, campaignOrNone(tr.deadRead), why)
	case res.hung:
		tr.fail(phase, "hung", "the daemon did not exit on SIGTERM:\n\t\t%s", campaignTail(out, 3000))
	case campaignCrashed(res.code, out):
		tr.fail(phase, "crash", "exit %d:\n\t\t%s", res.code, campaignCrashExcerpt(out))
	case res.code != 0:
		tr.fail(phase, "unclean exit", "the daemon exited with status %d on SIGTERM:\n\t\t%s", res.code, campaignTail(out, 1500))
	}
	tr.noted("%s: %d reads right, %d EIO, %d not checked", phase, st.ok, st.eio, st.skipped)
}

// readMount does checkMount's reads; it stops early when the daemon is gone.
func (tr *campaignTrial) readMount(phase, mnt string, d *mountDaemon) campaignReads {
	var st campaignReads
	alive := func() bool {
		if tr.deadRead != "" {
			return false
		}
		select {
		case <-d.exited:
			return false
		default:
			return true
		}
	}
	ents, err := os.ReadDir(mnt)
	if err != nil {
		tr.readFailed(phase, "ls MNT", err, true, &st)
		return st
	}
	listed := map[string]bool{}
	for _, e := range ents {
		listed[e.Name()] = true
	}
	for v := 1; v <= campaignVersions && alive(); v++ {
		name := fmt.Sprintf("weight_v%06d", v)
		if !listed[name] {
			if tr.versionIntact(v) && !(tr.latestManifestDeleted() && v == campaignVersions) {
				tr.fail(phase, "version missing", "%s is not listed although its manifest is intact", name)
			}
			st.skipped += len(tr.c.want[v])
			continue
		}
		for _, f := range campaignSortedKeys(tr.c.want[v]) {
			tr.checkRead(phase, filepath.Join(mnt, name, f), tr.c.want[v][f], tr.mustRead(v), &st)
		}
	}
	link, err := os.Readlink(filepath.Join(mnt, "latest"))
	if err == nil && alive() {
		var v int
		if _, err := fmt.Sscanf(link, "weight_v%d", &v); err == nil && tr.c.want[v] != nil {
			f := campaignSortedKeys(tr.c.want[v])[0]
			tr.checkRead(phase, filepath.Join(mnt, "latest", f), tr.c.want[v][f], tr.mustRead(v), &st)
		}
	}
	if tr.kind.cache && alive() && link != tr.c.latest {
		tr.fail(phase, "wrong latest", "latest -> %q (%v), want %s", link, err, tr.c.latest)
	}
	for _, view := range campaignSortedKeys(tr.c.views) {
		if !alive() {
			break
		}
		var v int
		base := view[strings.IndexByte(view, '/')+1:]
		if _, err := fmt.Sscanf(base, "weight_v%d", &v); err != nil {
			tr.t.Errorf("view %s: no version in its name", view) // not Fatal: not the test's goroutine
			continue
		}
		if !tr.versionIntact(v) || !tr.versionIntact(v-1) {
			// Its version or its base is damaged: which versions the view is made from may
			// change, so only the daemon's survival is checked.
			os.ReadFile(filepath.Join(mnt, view))
			st.skipped++
			continue
		}
		tr.checkRead(phase, filepath.Join(mnt, view), tr.c.views[view], tr.kind.cache, &st)
	}
	return st
}

// checkSeal writes the next version through the read-write mount, seals it with DONE and
// reads it back: damage of an older version, of a manifest or of a cache must not stop the
// store from taking new versions (docs/format.md §4.1, §6), nor make them unreadable.
func (tr *campaignTrial) checkSeal(mnt string, st *campaignReads) {
	v := campaignVersions + 1
	dir := versionDir(mnt, v)
	if err := os.Mkdir(dir, 0o755); err != nil {
		tr.sealFailed("mkdir "+filepath.Base(dir), err)
		return
	}
	for _, f := range campaignSortedKeys(tr.c.want[v]) {
		data, err := os.ReadFile(filepath.Join(tr.c.next, f))
		if err != nil {
			tr.t.Error(err) // not Fatal: not the test's goroutine
			return
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			tr.sealFailed("write "+f, err)
			return
		}
	}
	done, err := os.Create(filepath.Join(dir, "DONE"))
	if err == nil {
		err = done.Close()
	}
	if err != nil {
		tr.sealFailed("DONE", err)
		return
	}
	// A new version's objects may be deltas against a damaged object: only then may it EIO.
	must := tr.kind.name != "object" && !tr.campaignIsPackKind()
	for _, f := range campaignSortedKeys(tr.c.want[v]) {
		tr.checkRead("seal", filepath.Join(dir, f), tr.c.want[v][f], must, st)
	}
}

func (tr *campaignTrial) sealFailed(what string, err error) {
	if errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
		tr.deadRead = fmt.Sprintf("seal: %s: %v", what, err)
		return
	}
	tr.fail("seal", "seal failed", "writing v%d through the read-write mount: %s: %v", campaignVersions+1, what, err)
}

// mustRead says whether every read of version v must succeed: when only a cache is damaged
// (caches fall back to the store) or only another version's manifest.
func (tr *campaignTrial) mustRead(v int) bool {
	return tr.kind.cache || (tr.kind.name == "manifest" && v != tr.manifest)
}

// checkRead reads the file p through the mount: the right bytes, or EIO where the damage may
// explain it (must: never).
func (tr *campaignTrial) checkRead(phase, p, want string, must bool, st *campaignReads) {
	data, err := os.ReadFile(p)
	rel := strings.TrimPrefix(p, tr.work+"/")
	if err != nil {
		tr.readFailed(phase, rel, err, must, st)
		return
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != want {
		tr.fail(phase, "wrong bytes", "%s: read %d bytes with SHA-256 %s, want %s", rel, len(data), got, want)
		return
	}
	st.ok++
}

func (tr *campaignTrial) readFailed(phase, what string, err error, must bool, st *campaignReads) {
	switch {
	case errors.Is(err, syscall.ENOTCONN), errors.Is(err, syscall.ECONNABORTED):
		// The daemon is gone: checkMount reports it once, with its output.
		if tr.deadRead == "" {
			tr.deadRead = fmt.Sprintf("%s: %v", what, err)
		}
	case errors.Is(err, syscall.EIO) && must:
		tr.fail(phase, "EIO on intact data", "%s: %v (%s)", what, err, tr.whyMust(what))
	case errors.Is(err, syscall.EIO):
		st.eio++
	case errors.Is(err, syscall.ENOENT):
		tr.fail(phase, "ENOENT, want EIO", "%s: %v", what, err)
	default:
		tr.fail(phase, "unexpected error", "%s: %v", what, err)
	}
}

func (tr *campaignTrial) whyMust(what string) string {
	switch {
	case strings.Contains(what, fmt.Sprintf("weight_v%06d", campaignVersions+1)):
		return "a version sealed after the damage"
	case tr.kind.cache:
		return "only a cache is damaged"
	}
	return fmt.Sprintf("only v%d's manifest is damaged", tr.manifest)
}

func campaignOrNone(s string) string {
	if s == "" {
		return "no read"
	}
	return s
}

func campaignSortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
