package main

import (
	"fmt"
	"time"

	"github.com/weightfs/weightfs/store/location"
	"github.com/weightfs/weightfs/store/s3"
)

// cmdLease shows or breaks the writer's lease of a store: `weightfs lease show STORE`,
// `weightfs lease break STORE`.
func cmdLease(e *env, args []string) error {
	fs := newFlags("lease")
	sf := addStoreFlags(fs, false)
	pos, err := parse(e, fs, args, 2, 2)
	if err != nil {
		return err
	}
	var opts location.Options
	if err := sf.apply(&opts); err != nil {
		return err
	}
	opts.Logger = e.log
	switch pos[0] {
	case "show":
		info, err := location.ShowLease(pos[1], opts)
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, describeLease(pos[1], info))
		return nil
	case "break":
		info, err := location.BreakLease(pos[1], opts)
		if err != nil {
			return err
		}
		if !info.Held {
			fmt.Fprintf(e.stdout, "%s: no writer lease to break\n", pos[1])
			return nil
		}
		fmt.Fprintf(e.stdout, "broke the writer lease of %s held by %s; if that writer still runs, it can no longer seal versions\n", pos[1], info.Owner)
		return nil
	}
	return usagef("unknown lease action %q: use show or break", pos[0])
}

func describeLease(path string, info s3.LeaseInfo) string {
	switch {
	case !info.Held:
		return fmt.Sprintf("%s: no writer holds it", path)
	case info.Owner == "":
		return fmt.Sprintf("%s: a writer holds its lock (a local flock, released when that process exits)", path)
	case info.Expired:
		return fmt.Sprintf("%s: the lease of %s expired %s ago (at %s); the next writer takes it over",
			path, info.Owner, time.Since(info.Expires).Round(time.Second), info.Expires.Local().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s: held by %s since %s, renewed %s, expires %s unless renewed (token %s)",
		path, info.Owner, info.Acquired.Local().Format(time.RFC3339), info.Renewed.Local().Format(time.RFC3339),
		info.Expires.Local().Format(time.RFC3339), info.Token)
}
