package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The ranks of these tests are processes: the test binary run again as
// TestGroupRankProcess, told what to do by the environment.
const (
	envRankRoot    = "WEIGHTFS_TEST_RANK_ROOT"
	envRankCache   = "WEIGHTFS_TEST_RANK_CACHE"
	envRankRank    = "WEIGHTFS_TEST_RANK"
	envRankVersion = "WEIGHTFS_TEST_RANK_VERSION"
	envRankHang    = "WEIGHTFS_TEST_RANK_HANG" // a file: stores its files, creates it, waits to be killed
)

// TestGroupRankProcess is one rank's process (it skips unless a test started it): rank R of
// 4 of group "g" writes its part of version V of groupSeries.
func TestGroupRankProcess(t *testing.T) {
	root := os.Getenv(envRankRoot)
	if root == "" {
		t.Skip("run by TestGroupRanksAsProcesses")
	}
	r, _ := strconv.Atoi(os.Getenv(envRankRank))
	v, _ := strconv.ParseUint(os.Getenv(envRankVersion), 10, 64)
	files := groupSeries(t, int(v))[v-1]
	s, err := OpenRank(root, Rank{Group: "g", Rank: r, Ranks: 4}, Options{CacheDir: os.Getenv(envRankCache)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mine := func(n string) bool { return shardOwner(n, 4) == r }
	hang := os.Getenv(envRankHang)
	if hang == "" {
		if _, err := writePart(s, v, files, mine); err != nil {
			t.Fatal(err)
		}
		return
	}
	var own []string
	for _, n := range sortedNames(files) {
		if mine(n) {
			own = append(own, n)
		}
	}
	w, err := s.NewPart(v, own...)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range own {
		if err := w.AddFile(n, bytes.NewReader(files[n]), int64(len(files[n])), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(hang, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute) // killed before this ends
	t.Fatal("not killed")
}

// rankProcess starts rank r's process for version v.
func rankProcess(t *testing.T, root, cacheBase string, r int, v uint64, hang string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestGroupRankProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRankRoot+"="+root, envRankCache+"="+filepath.Join(cacheBase, fmt.Sprint(r)),
		envRankRank+"="+fmt.Sprint(r), envRankVersion+"="+fmt.Sprint(v), envRankHang+"="+hang)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("rank %d, version %d:\n%s", r, v, out.String())
		}
	})
	return cmd
}

// TestGroupRanksAsProcesses: 4 ranks, each its own process, write 3 versions of a sharded
// checkpoint and the writer publishes each; in version 3 rank 3 is killed (SIGKILL) after
// storing its shard: the version does not appear until rank 3, started again, writes its
// part. Every version exports as written, and the store verifies.
func TestGroupRanksAsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 13 processes")
	}
	series := groupSeries(t, 3)
	pub, root := newStore(t, Options{})
	caches := t.TempDir()
	for i, files := range series {
		v := uint64(i + 1)
		var cmds []*exec.Cmd
		var hung *exec.Cmd
		ready := filepath.Join(t.TempDir(), "ready")
		for r := range 4 {
			if v == 3 && r == 3 {
				hung = rankProcess(t, root, caches, r, v, ready)
				continue
			}
			cmds = append(cmds, rankProcess(t, root, caches, r, v, ""))
		}
		for _, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("a rank of version %d: %v", v, err)
			}
		}
		if hung != nil {
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("rank 3 never stored its shard")
				}
			}
			hung.Process.Signal(syscall.SIGKILL)
			hung.Wait()
			_, err := pub.PublishGroup("g", v, 4)
			if !errors.Is(err, ErrGroupIncomplete) || !strings.Contains(err.Error(), "rank 3 is writing") {
				t.Fatalf("publish with rank 3 killed: %v", err)
			}
			if err := rankProcess(t, root, caches, 3, v, "").Wait(); err != nil {
				t.Fatalf("rank 3 started again: %v", err)
			}
		}
		if _, err := pub.PublishGroup("g", v, 4); err != nil {
			t.Fatalf("publish version %d: %v", v, err)
		}
		sameTree(t, fmt.Sprintf("v%d", v), exportHashes(t, pub, v), fileHashes(files))
	}
	if left := groupRecordNames(t, pub); len(left) != 0 {
		t.Fatalf("records left: %v", left)
	}
}
