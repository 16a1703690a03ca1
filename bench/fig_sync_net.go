package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Figure 9's network: a veth pair between this network namespace (the trainer's side, where
// the S3 server and the writer run) and a namespace the benchmark creates for the reader,
// both ends shaped to linkRate with tc's token bucket filter once the stage is set. Everything
// is on this machine; nothing leaves it.

// linkRate is the shaped link's rate, as tc writes it, and in bits per second.
const (
	linkRate     = "1gbit"
	linkRateBits = 1e9
)

// netLink is the reader's namespace and the veth pair to it.
type netLink struct {
	ns         string // network namespace (ip netns): /run/netns/NS
	hostDev    string // the veth end in our namespace
	nsDev      string // the end in NS
	hostIP     string
	nsIP       string
	commands   []string // every command run, for the log
	cleanupRun func() error
}

// linkNames derives the namespace, device and address names of a run from its process id:
// device names stay within the kernel's 15 bytes, and two runs on one machine do not collide.
func linkNames(pid int) (ns, hostDev, nsDev, hostIP, nsIP string) {
	id := pid % 10_000_000
	third := pid%250 + 1
	return fmt.Sprintf("wfsbench-%d", id), fmt.Sprintf("wfb%dh", id), fmt.Sprintf("wfb%dn", id),
		fmt.Sprintf("10.231.%d.1", third), fmt.Sprintf("10.231.%d.2", third)
}

// linkTools reports what figure 9 needs that is missing: root, ip and tc (iproute2), nsenter.
func linkTools() []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, t := range []string{"ip", "tc", "nsenter"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	return missing
}

// run runs one command of the link's setup or teardown.
func (l *netLink) run(ctx context.Context, name string, args ...string) error {
	l.commands = append(l.commands, name+" "+strings.Join(args, " "))
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setUpLink creates the namespace and the veth pair, unshaped. Its removal is registered
// with the cleaner before anything is created, so every exit path removes it.
func (b *bench) setUpLink(ctx context.Context) (*netLink, error) {
	l := &netLink{}
	l.ns, l.hostDev, l.nsDev, l.hostIP, l.nsIP = linkNames(os.Getpid())
	l.cleanupRun = b.clean.add("remove network namespace "+l.ns, l.remove)
	steps := [][]string{
		{"ip", "netns", "add", l.ns},
		{"ip", "link", "add", l.hostDev, "type", "veth", "peer", "name", l.nsDev},
		{"ip", "link", "set", l.nsDev, "netns", l.ns},
		{"ip", "addr", "add", l.hostIP + "/30", "dev", l.hostDev},
		{"ip", "link", "set", l.hostDev, "up"},
		{"ip", "-n", l.ns, "addr", "add", l.nsIP + "/30", "dev", l.nsDev},
		{"ip", "-n", l.ns, "link", "set", l.nsDev, "up"},
		{"ip", "-n", l.ns, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := l.run(ctx, s[0], s[1:]...); err != nil {
			l.cleanupRun()
			return nil, fmt.Errorf("set up the reader's network: %w", err)
		}
	}
	return l, nil
}

// shape puts a token bucket filter of linkRate on both ends (each shapes what it sends).
func (l *netLink) shape(ctx context.Context) error {
	tbf := []string{"qdisc", "add", "dev", "DEV", "root", "tbf", "rate", linkRate, "burst", "256kb", "latency", "50ms"}
	for _, side := range []struct {
		dev string
		ns  []string
	}{{l.hostDev, nil}, {l.nsDev, []string{"-n", l.ns}}} {
		args := append(append([]string{}, side.ns...), tbf...)
		for i, a := range args {
			if a == "DEV" {
				args[i] = side.dev
			}
		}
		if err := l.run(ctx, "tc", args...); err != nil {
			return fmt.Errorf("shape the link: %w", err)
		}
	}
	return nil
}

// remove deletes the namespace (which takes its veth end, and so the pair, with it) and the
// host end if it is still there. A namespace that was never created is not an error.
func (l *netLink) remove() error {
	var errs []string
	ctx := context.Background()
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil && strings.Contains(string(out), l.ns) {
		if err := l.run(ctx, "ip", "netns", "del", l.ns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	// The namespace's end takes the pair with it, asynchronously: the host end may vanish
	// between the look and the delete, which is not an error.
	if _, err := os.Stat("/sys/class/net/" + l.hostDev); err == nil {
		if err := l.run(ctx, "ip", "link", "del", l.hostDev); err != nil {
			if _, serr := os.Stat("/sys/class/net/" + l.hostDev); serr == nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// inNS returns the command line that runs argv in the reader's network namespace only (nsenter
// --net: unlike `ip netns exec` it keeps our mount namespace, so a FUSE mount made there is
// ours to read and unmount).
func (l *netLink) inNS(argv ...string) (string, []string) {
	return "nsenter", append([]string{"--net=/run/netns/" + l.ns, "--"}, argv...)
}

// runFetch is `bench fetch DIR URL...`: GET each URL into DIR/<its last path element>, the
// baseline's copy of a checkpoint over the link. It prints the bytes it received.
func runFetch(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprintln(stderr, "usage: bench fetch DIR URL...")
		return 2
	}
	dir := args[0]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "bench fetch: %v\n", err)
		return 1
	}
	client := &http.Client{Timeout: 10 * time.Minute}
	var total int64
	for _, u := range args[1:] {
		n, err := fetchOne(client, u, filepath.Join(dir, path.Base(u)))
		total += n
		if err != nil {
			fmt.Fprintf(stderr, "bench fetch: %v\n", err)
			return 1
		}
	}
	fmt.Fprintln(stdout, total)
	return 0
}

func fetchOne(client *http.Client, url, dst string) (int64, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(f, resp.Body, make([]byte, 4<<20))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("GET %s: %w", url, err)
	}
	return n, nil
}
