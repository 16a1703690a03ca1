package main

import (
	"flag"
	"time"

	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
)

// groupFlags are mount's flags of a writer group (docs/format.md Part I §9): the mount is
// rank R of W of group NAME, and one of the group's mounts may also publish.
type groupFlags struct {
	name        string
	rank, ranks int
	publish     bool
	pubPoll     time.Duration
	wait        time.Duration
}

func addGroupFlags(fs *flag.FlagSet) *groupFlags {
	g := &groupFlags{}
	fs.StringVar(&g.name, "group", "", "this mount is a rank of the writer group NAME: it writes its own files of each version, and DONE's close seals its part and returns once the group's publisher has published the version")
	fs.IntVar(&g.rank, "rank", -1, "with --group: this mount's rank, 0..W-1")
	fs.IntVar(&g.ranks, "ranks", 0, "with --group: W, how many ranks the group has")
	fs.BoolVar(&g.publish, "publish", false, "with --group: this mount also publishes the group's versions (it takes the store's writer lock or lease; exactly one mount of the group does)")
	fs.DurationVar(&g.wait, "group-wait", 30*time.Minute, "with --group: how long DONE's close waits for the publisher once this rank's part is sealed; past it the close fails with ETIMEDOUT and the log names the ranks that have not sealed (0: no bound)")
	fs.DurationVar(&g.pubPoll, "publish-poll", 200*time.Millisecond, "with --publish: how often to look for versions whose every part is sealed")
	return g
}

// check refuses group flags that do not fit together.
func (g *groupFlags) check(readOnly bool) error {
	switch {
	case g.name == "" && (g.rank >= 0 || g.ranks != 0 || g.publish):
		return usagef("--rank, --ranks and --publish need --group")
	case g.name == "":
		return nil
	case readOnly:
		return usagef("--group is a writer's: a read-only mount reads a group's versions as any")
	case g.ranks < 1 || g.rank < 0 || g.rank >= g.ranks:
		return usagef("--group needs --rank R and --ranks W with 0 <= R < W")
	}
	return store.CheckGroupName(g.name)
}

// startPublisher opens the store as its writer (default cache directory, the mount's other
// options) and publishes the group's complete versions every poll, until the returned
// function is called; it closes the store.
func startPublisher(e *env, where string, g *groupFlags, sopts location.Options) (func(), error) {
	sopts.CacheDir, sopts.ReadOnly, sopts.Materialize = "", false, false
	pub, err := location.Open(where, sopts)
	if err != nil {
		return nil, err
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		said := "" // an error is logged once, not at every poll
		for {
			infos, refused, err := pub.PublishReady(g.name, g.ranks)
			for _, info := range infos {
				e.log.Info("published a version of the writer group", "group", g.name, "version", info.Number, "files", info.Files, "stored", info.StoredBytes)
			}
			for _, r := range refused {
				e.log.Error("writer group: version refused (the ranks' DONE fails with ECANCELED)", "group", g.name, "err", r)
			}
			if err != nil && err.Error() != said {
				e.log.Error("writer group: a version cannot be published", "group", g.name, "err", err)
			}
			if err != nil {
				said = err.Error()
			} else {
				said = ""
			}
			select {
			case <-stop:
				return
			case <-time.After(g.pubPoll):
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped
		if err := pub.Close(); err != nil {
			e.log.Warn("close the publisher's store", "err", err)
		}
	}, nil
}
