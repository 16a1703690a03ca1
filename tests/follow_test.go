package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// weightfs follow (docs/format.md Part III §3, Following a mount): a local checkpoint directory kept at a read-only mount's latest
// version by catch-up patches, checked by SHA-256 after every version.

// follower is one `weightfs follow` process.
type follower struct {
	cmd    *exec.Cmd
	out    *lockedBuffer
	exited chan struct{}
}

func startFollower(t *testing.T, mnt, dir string, args ...string) *follower {
	t.Helper()
	f := &follower{out: &lockedBuffer{}, exited: make(chan struct{})}
	f.cmd = weightfsCommand(weightfsBin(t), append([]string{"follow", "--interval", "50ms"}, append(args, mnt, dir)...)...)
	f.cmd.Stdout, f.cmd.Stderr = f.out, f.out
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = f.cmd.Wait(); close(f.exited) }()
	t.Cleanup(f.kill9)
	return f
}

func (f *follower) kill9() {
	_ = f.cmd.Process.Kill()
	<-f.exited
}

// waitDirVersion waits until dir's state records version v with no step pending.
func waitDirVersion(t *testing.T, dir string, v uint64, f *follower) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for {
		st, ok, err := delta.ReadDirState(dir)
		if err == nil && ok && st.Version == v && st.Pending == 0 {
			return
		}
		select {
		case <-f.exited:
			t.Fatalf("follower exited before version %d:\n%s", v, f.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach version %d (state %+v, %v):\n%s", dir, v, st, err, f.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// followedHashes is treeHashes of a followed directory less weightfs's own files (the state
// directory, the apply locks left beside the files).
func followedHashes(t *testing.T, dir string) map[string]string {
	m := treeHashes(t, dir)
	for k := range m {
		if strings.HasPrefix(k, delta.StateDir+"/") || strings.HasSuffix(k, ".weightfs-apply.lock") {
			delete(m, k)
		}
	}
	return m
}

func followMounts(t *testing.T) (work, storeDir, rw, ro string, rwMount *mountDaemon) {
	skipWithoutFUSE(t)
	work = t.TempDir()
	storeDir = filepath.Join(work, "store")
	initStore(t, storeDir)
	rw, ro = filepath.Join(work, "rw"), filepath.Join(work, "ro")
	for _, d := range []string{rw, ro} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rwMount = startMount(t, storeDir, rw)
	return work, storeDir, rw, ro, rwMount
}

func sealVersion(t *testing.T, rw string, v int, src string) {
	run(t, "cp", "-r", src, versionDir(rw, v))
	run(t, "touch", filepath.Join(versionDir(rw, v), "DONE"))
	os.RemoveAll(src)
}

// TestFollow: a read-write mount takes 20 versions; a follower of a read-only mount keeps a
// directory exactly at each in turn. The follower is killed after version 7 and started again
// after 9 (it catches up from 7 to 9 by one patch), and the read-only mount is stopped after
// 12 and mounted again after 13. Only the first version is copied whole; --exec runs once per
// version reached, with the version in its environment.
func TestFollow(t *testing.T) {
	work, storeDir, rw, ro, _ := followMounts(t)
	roFlags := []string{"--read-only", "--cache-dir", filepath.Join(work, "ro-cache"), "--poll", "100ms"}
	roMount := startMount(t, storeDir, ro, roFlags...)
	dir := filepath.Join(work, "follow")
	execLog := filepath.Join(work, "exec.log")
	execArgs := []string{"--exec", `echo "$WEIGHTFS_VERSION $WEIGHTFS_BASE_VERSION $WEIGHTFS_DIR" >> ` + execLog}
	var f *follower
	var outputs []string
	want := genSeries(t, work, 1_000_000, 31, 20, func(v int, src string) {
		sealVersion(t, rw, v, src)
		switch v {
		case 1:
			f = startFollower(t, ro, dir, execArgs...)
		case 8:
			return // the follower is down: it catches up at 9
		case 9:
			waitForListing(t, ro, versionDir(ro, 9)) // so that the follower sees 9 at once
			f = startFollower(t, ro, dir, execArgs...)
		case 13:
			roMount = startMount(t, storeDir, ro, roFlags...)
		}
		waitDirVersion(t, dir, uint64(v), f)
		sameHashes(t, fmt.Sprintf("followed directory at version %d", v), followedHashes(t, dir), treeHashes(t, versionDir(rw, v)))
		switch v {
		case 7:
			f.kill9()
			outputs = append(outputs, f.out.String())
		case 12:
			roMount.stop()
		}
	})
	sameHashes(t, "followed directory at the end", followedHashes(t, dir), want[20])
	outputs = append(outputs, f.out.String())
	all := strings.Join(outputs, "")
	if n := strings.Count(all, "copied whole"); n != 1 {
		t.Errorf("%d full copies, want 1 (the first version):\n%s", n, all)
	}
	if !strings.Contains(all, "version 7 -> 9") {
		t.Errorf("the restarted follower did not catch up from 7 to 9 by one patch:\n%s", all)
	}
	// --exec runs after the state records the version: wait (generously) for its last line.
	var log []byte
	for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if log, _ = os.ReadFile(execLog); strings.Count(string(log), "\n") >= 19 {
			break
		}
	}
	var wantLog strings.Builder
	for v := 1; v <= 20; v++ {
		switch v {
		case 1:
			fmt.Fprintf(&wantLog, "1 0 %s\n", dir)
		case 8:
		case 9:
			fmt.Fprintf(&wantLog, "9 7 %s\n", dir)
		default:
			fmt.Fprintf(&wantLog, "%d %d %s\n", v, v-1, dir)
		}
	}
	if string(log) != wantLog.String() {
		t.Errorf("--exec ran with:\n%s\nwant:\n%s", log, wantLog.String())
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("follower output:\n%s", all)
	}

	// The catch-up patch the follower would fetch from 3 is the file `weightfs patch --from`
	// writes, resolvable by name but not listed; none from a later version.
	p := filepath.Join(work, "from3.safetensors")
	mustCLI(t, "patch", storeDir, "20", "--from", "3", "-o", p)
	name := "weight_v000020.from_v000003.safetensors"
	if got, want := mustSHA256(t, filepath.Join(ro, "patches", name)), mustSHA256(t, p); got != want {
		t.Errorf("%s: sha256 %s in the mount, weightfs patch --from wrote %s", name, got, want)
	}
	if strings.Contains(rootListing(t, filepath.Join(ro, "patches")), ".from_") {
		t.Errorf("catch-up patches are listed in patches/")
	}
	if _, err := os.Stat(filepath.Join(ro, "patches", "weight_v000003.from_v000020.safetensors")); !os.IsNotExist(err) {
		t.Errorf("a catch-up patch from a later version: %v, want ENOENT", err)
	}
}

// TestFollowFallsBack: when no patch can exist (the tensor layout changed), the follower copies
// the version whole, says why, and goes on by patches afterwards.
func TestFollowFallsBack(t *testing.T) {
	work, _, rw, _, rwMount := followMounts(t)
	dir := filepath.Join(work, "follow")
	seal := func(v int, shape []int64, fill byte) map[string]string {
		src := filepath.Join(work, fmt.Sprintf("src%d", v))
		os.MkdirAll(src, 0o755)
		tensors := []delta.Tensor{{Name: "w", DType: delta.DTypeBF16, Shape: shape}}
		hdr, err := delta.EncodeHeader(nil, tensors)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, tensors[0].End)
		for i := range data {
			data[i] = byte(i) ^ fill
		}
		os.WriteFile(filepath.Join(src, "model.safetensors"), append(hdr, data...), 0o644)
		os.WriteFile(filepath.Join(src, "config.json"), []byte(fmt.Sprintf(`{"v": %d}`, v)), 0o644)
		want := treeHashes(t, src)
		sealVersion(t, rw, v, src)
		return want
	}
	want := seal(1, []int64{64, 64}, 0)
	f := startFollower(t, rw, dir)
	waitDirVersion(t, dir, 1, f)
	sameHashes(t, "version 1", followedHashes(t, dir), want)
	want = seal(2, []int64{32, 128}, 1) // reshaped: no patch from 1
	waitDirVersion(t, dir, 2, f)
	sameHashes(t, "version 2", followedHashes(t, dir), want)
	want = seal(3, []int64{32, 128}, 3)
	waitDirVersion(t, dir, 3, f)
	sameHashes(t, "version 3", followedHashes(t, dir), want)
	out := f.out.String()
	if !strings.Contains(out, "no patch from version 1 to 2 can exist") || strings.Count(out, "copied whole") != 2 ||
		!strings.Contains(out, "version 2 -> 3") {
		t.Errorf("follower output:\n%s", out)
	}
	// The daemon's log says why each version's patch is not sparse throughout.
	log := rwMount.out.String()
	if !strings.Contains(log, "version 2: no patch: tensor layout changed since version 1: tensor w of model.safetensors changed") ||
		!strings.Contains(log, "version 3: patch carries 1 file(s) whole, 8 bytes: config.json (not safetensors)") {
		t.Errorf("the mount's log does not say why:\n%s", log)
	}
}

// TestFollowKill9: a follower killed with SIGKILL at random points (while versions arrive)
// and started again ends at the latest version, bit for bit.
func TestFollowKill9(t *testing.T) {
	work, storeDir, rw, ro, _ := followMounts(t)
	startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"), "--poll", "100ms")
	dir := filepath.Join(work, "follow")
	rng := rand.New(rand.NewPCG(18, 9))
	const versions = 12
	var kills []string
	want := genSeries(t, work, 2_000_000, 37, versions, func(v int, src string) {
		sealVersion(t, rw, v, src)
		if v%3 == 2 {
			return // two versions arrive between some runs
		}
		// Several kills per version, at random points of the follower's run: before it
		// reads latest, while the mount renders the patch, mid-directory, after.
		for range 3 {
			f := startFollower(t, ro, dir)
			time.Sleep(time.Duration(rng.IntN(120)) * time.Millisecond)
			f.kill9()
			st, ok, _ := delta.ReadDirState(dir)
			switch {
			case !ok:
				kills = append(kills, "unmarked")
			case st.Pending != 0:
				kills = append(kills, fmt.Sprintf("%d->%d", st.Version, st.Pending))
			default:
				kills = append(kills, fmt.Sprint(st.Version))
			}
		}
	})
	waitForListing(t, ro, versionDir(ro, versions))
	r := mustCLI(t, "follow", "--once", ro, dir)
	st, _, err := delta.ReadDirState(dir)
	if err != nil || st.Version != versions || st.Pending != 0 {
		t.Fatalf("after follow --once: state %+v, %v\n%s", st, err, r.stderr)
	}
	sameHashes(t, "followed directory after kills", followedHashes(t, dir), want[versions])
	t.Logf("state after each kill (K->N: a step pending): %s; follow --once said:\n%s", strings.Join(kills, " "), r.stderr)
}

// TestFollowOnceAfterInterruptedStep: `follow --once` over a directory a killed follower left
// with a step pending finishes that step and goes on to the latest version, as its help says
// ("bring DIR to the latest version once"), rather than stopping at the pending version.
func TestFollowOnceAfterInterruptedStep(t *testing.T) {
	work, _, rw, _, _ := followMounts(t)
	dir := filepath.Join(work, "follow")
	const versions = 3
	want := genSeries(t, work, 200_000, 41, versions, func(v int, src string) {
		sealVersion(t, rw, v, src)
		if v == 1 {
			mustCLI(t, "follow", "--once", rw, dir)
		}
	})
	// The state a follower killed after marking the step from 1 to 2 leaves (no file touched).
	if err := delta.WriteDirState(dir, delta.DirState{Version: 1, Pending: 2, Source: rw}); err != nil {
		t.Fatal(err)
	}
	r := mustCLI(t, "follow", "--once", rw, dir)
	st, _, err := delta.ReadDirState(dir)
	if err != nil || st.Version != versions || st.Pending != 0 {
		t.Fatalf("after follow --once: state %+v, %v, want version %d\n%s", st, err, versions, r.stderr)
	}
	sameHashes(t, "followed directory", followedHashes(t, dir), want[versions])
}

// TestFollowPendingVersionGone (issue 27, item 8): a follower killed in the middle of a step
// (a full copy of version 1, or the patch from 1 to 2) and started again after gc dropped the
// version that step was taking the directory to goes on to the latest version rather than
// failing every round.
func TestFollowPendingVersionGone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state delta.DirState
	}{
		{"full copy", delta.DirState{Version: 0, Pending: 1, Full: true}},
		{"patch", delta.DirState{Version: 1, Pending: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work, storeDir, rw, ro, rwMount := followMounts(t)
			dir := filepath.Join(work, "follow")
			want := genSeries(t, work, 200_000, 47, 3, func(v int, src string) {
				sealVersion(t, rw, v, src)
				if v != 1 {
					return
				}
				if tc.state.Version == 1 {
					mustCLI(t, "follow", "--once", rw, dir) // the directory holds 1
					return
				}
				// Killed after copying one file of version 1.
				os.MkdirAll(dir, 0o755)
				run(t, "cp", filepath.Join(versionDir(rw, 1), "config.json"), dir)
			})
			if err := delta.WriteDirState(dir, tc.state); err != nil {
				t.Fatal(err)
			}
			rwMount.stop()
			mustCLI(t, "gc", "--keep-last", "1", storeDir)
			startMount(t, storeDir, ro, "--read-only", "--cache-dir", filepath.Join(work, "ro-cache"))
			r := runCLI(t, "follow", "--once", ro, dir)
			st, _, err := delta.ReadDirState(dir)
			if r.code != 0 || err != nil || st.Version != 3 || st.Pending != 0 {
				t.Fatalf("follow --once: exit %d, state %+v (%v), want version 3:\n%s", r.code, st, err, r.stderr)
			}
			sameHashes(t, "followed directory", followedHashes(t, dir), want[3])
			if !strings.Contains(r.stderr, fmt.Sprintf("version %d", tc.state.Pending)) {
				t.Errorf("the follower did not say what became of the interrupted step:\n%s", r.stderr)
			}
		})
	}
}

// versionFile is one file of a hand-made version: its bytes and mode.
type versionFile struct {
	data []byte
	mode os.FileMode
}

// bf16Model is a safetensors file of one BF16 tensor "w" of shape, filled from fill.
