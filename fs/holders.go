package fs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const (
	// maxHolders and maxUses bound what MountHolders reports: enough to find the culprits, not
	// a line of a thousand open files.
	maxHolders = 8
	maxUses    = 4
)

// MountHolders lists the processes that keep the file system at mnt busy, one string each
// ("pid 123 (python3): cwd, fd 7 weight_v000003/model.safetensors"): their working or root
// directory, open descriptors and mapped files under mnt, as /proc shows them. It is a best
// effort, like fuser(1): processes of other mount namespaces, or that this process may not
// inspect, are missed. It reads only links and text in /proc, so it never calls into mnt.
func MountHolders(mnt string) []string {
	mnt = filepath.Clean(mnt)
	// /proc shows resolved paths: resolve the parent (never mnt itself, which is busy and
	// may be served by this very process).
	if dir, err := filepath.EvalSymlinks(filepath.Dir(mnt)); err == nil {
		mnt = filepath.Join(dir, filepath.Base(mnt))
	}
	return scanHolders("/proc", mnt)
}

func scanHolders(proc, mnt string) []string {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	var out []string
	more := 0
	for _, pid := range pids {
		uses := processUses(filepath.Join(proc, strconv.Itoa(pid)), mnt)
		if len(uses) == 0 {
			continue
		}
		if len(out) == maxHolders {
			more++
			continue
		}
		if len(uses) > maxUses {
			uses = append(uses[:maxUses], fmt.Sprintf("%d more", len(uses)-maxUses))
		}
		comm, _ := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "comm"))
		out = append(out, fmt.Sprintf("pid %d (%s): %s", pid, strings.TrimSpace(string(comm)), strings.Join(uses, ", ")))
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("%d more processes", more))
	}
	return out
}

// processUses lists what the process whose /proc directory is dir has under mnt.
func processUses(dir, mnt string) []string {
	var uses []string
	for _, l := range []string{"cwd", "root"} {
		if t, err := os.Readlink(filepath.Join(dir, l)); err == nil && under(t, mnt) {
			uses = append(uses, l+" "+relTo(t, mnt))
		}
	}
	if fds, err := os.ReadDir(filepath.Join(dir, "fd")); err == nil {
		for _, fd := range fds {
			if t, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && under(t, mnt) {
				uses = append(uses, "fd "+fd.Name()+" "+relTo(t, mnt))
			}
		}
	}
	if f, err := os.Open(filepath.Join(dir, "maps")); err == nil {
		seen := map[string]bool{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// address perms offset dev inode path: the path is the sixth field and may hold
			// spaces.
			fields := strings.SplitN(sc.Text(), " ", 6)
			if len(fields) < 6 {
				continue
			}
			p := strings.TrimLeft(fields[5], " ")
			if under(p, mnt) && !seen[p] {
				seen[p] = true
				uses = append(uses, "mapped "+relTo(p, mnt))
			}
		}
		f.Close()
	}
	return uses
}

func under(p, mnt string) bool {
	return p == mnt || strings.HasPrefix(p, mnt+"/")
}

// relTo names p by its path in the mount ("." for the mount point itself).
func relTo(p, mnt string) string {
	if p == mnt {
		return "."
	}
	return strings.TrimPrefix(p, mnt+"/")
}
