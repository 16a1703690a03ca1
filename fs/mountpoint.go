package fs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// fuseConfPath is where fusermount3 reads user_allow_other.
const fuseConfPath = "/etc/fuse.conf"

// CheckMountpoint runs the checks Mount makes before it mounts at mnt with opts that do not
// need the store: a daemon calls it first, so that a mount that must fail fails before the
// store is opened (a reader's copy may take minutes to bring up to date). A mount point left
// by a dead daemon is not detected here: Mount detaches it.
func CheckMountpoint(mnt string, opts Options) error {
	if _, err := os.Stat(mnt); err != nil {
		return nil // Mount handles a stale or missing mount point, with its own message
	}
	if err := checkMountpoint(mnt, opts.AllowNonEmpty); err != nil {
		return err
	}
	if opts.AllowOther && os.Geteuid() != 0 {
		return checkUserAllowOther(fuseConfPath)
	}
	return nil
}

// checkMountpoint refuses a mount point that is already mounted (a live file system there:
// a second mount on top would hide it) and, unless allowNonEmpty, one that holds files (a
// mount would hide them, and a trainer writing there would not see what it expects). It runs
// after prepareMountpoint has detached a stale mount of a dead daemon.
func checkMountpoint(mnt string, allowNonEmpty bool) error {
	if m, ok := mountAt(mnt); ok {
		return fmt.Errorf("mount point %s: %w (%s, type %s): unmount it first (`umount %s`) or choose another directory",
			mnt, ErrAlreadyMounted, m.source, m.fstype, mnt)
	}
	if allowNonEmpty {
		return nil
	}
	d, err := os.Open(mnt)
	if err != nil {
		return fmt.Errorf("mount point %s: %w", mnt, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mount point %s: %w", mnt, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("mount point %s: %w (it holds %q, which the mount would hide): empty it, choose another directory, or mount with --allow-non-empty (-o allow_non_empty)",
			mnt, ErrMountpointNotEmpty, names[0])
	}
	return nil
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct{ point, fstype, source string }

// mountAt returns the innermost mount whose mount point is mnt in this mount namespace.
func mountAt(mnt string) (mountEntry, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mountEntry{}, false
	}
	defer f.Close()
	return findMount(f, mnt)
}

// findMount parses mountinfo (proc(5): ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - TYPE
// SOURCE SUPEROPTS) and returns the last entry mounted at mnt: later lines stack on earlier.
func findMount(r io.Reader, mnt string) (mountEntry, bool) {
	var found mountEntry
	ok := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeOctal(fields[4]) != mnt {
			continue
		}
		e := mountEntry{point: mnt, fstype: "?", source: "?"}
		for i := 5; i < len(fields); i++ {
			if fields[i] == "-" {
				if i+1 < len(fields) {
					e.fstype = fields[i+1]
				}
				if i+2 < len(fields) {
					e.source = unescapeOctal(fields[i+2])
				}
				break
			}
		}
		found, ok = e, true
	}
	return found, ok
}

// unescapeOctal undoes mountinfo's escapes of space, tab, newline and backslash (\040).
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// checkUserAllowOther returns ErrAllowOtherForbidden, with what to change, unless the FUSE
// configuration at path has a user_allow_other line (fusermount3 reads it the same way:
// the word alone on a line, comments start with #).
func checkUserAllowOther(path string) error {
	data, err := os.ReadFile(path)
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.TrimSpace(line) == "user_allow_other" {
				return nil
			}
		}
	}
	why := fmt.Sprintf("%s has no line user_allow_other", path)
	if err != nil {
		why = err.Error()
	}
	return fmt.Errorf("--allow-other as uid %d: %w (%s): as root, add the line `user_allow_other` to %s (or uncomment it), or mount as root",
		os.Geteuid(), ErrAllowOtherForbidden, why, path)
}
