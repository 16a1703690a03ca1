package main

import (
	"errors"
	"flag"

	"github.com/weightfs/weightfs/store"
)

// retentionFlags adds mount's retention flags (docs/operations.md, "Retention").
func retentionFlags(fs *flag.FlagSet, mf *mountFlags) {
	fs.IntVar(&mf.keepLast, "keep-last", 0, "read-write mount: after each seal, gc in the background keeping the newest N versions (and pinned ones); 0: keep all (-o keep_last=N)")
	fs.IntVar(&mf.keepEvery, "keep-every", 0, "with --keep-last: also keep every version whose number is a multiple of K (milestones) (-o keep_every=K)")
	fs.BoolVar(&mf.keepExact, "keep-exact", false, "with --keep-last: drop down to exactly N versions after every seal, however many bytes of whole copies re-anchoring writes (by default retention waits until dropping frees at least what it writes) (-o keep_exact)")
}

// retentionPolicy checks the retention flags of mount.
func retentionPolicy(readOnly bool, keepLast, keepEvery int, exact bool) (store.Retention, error) {
	switch {
	case exact && keepLast == 0:
		return store.Retention{}, usagef("--keep-exact needs --keep-last")
	case keepLast < 0 || keepEvery < 0:
		return store.Retention{}, usagef("--keep-last and --keep-every must not be negative")
	case keepEvery > 0 && keepLast == 0:
		return store.Retention{}, usagef("--keep-every needs --keep-last")
	case keepLast > 0 && readOnly:
		return store.Retention{}, usagef("--keep-last applies to the read-write mount (the writer runs gc); readers keep their version with a pin")
	}
	return store.Retention{KeepLast: keepLast, KeepEvery: keepEvery, Exact: exact}, nil
}

// pinVersion pins version v for as long as the mount serves it (store.Pin) and returns the
// function that removes the pin. A store that cannot hold pins (S3), or a pin directory the
// reader may not write, only costs the protection: the mount serves anyway, and says so.
func pinVersion(e *env, st *store.Store, v uint64) func() {
	pin, err := st.Pin(v)
	if err != nil {
		if errors.Is(err, store.ErrPinUnsupported) {
			e.log.Warn("version not pinned (S3 stores hold no pins): a gc may remove it while it is served", "version", v)
		} else {
			e.log.Warn("version not pinned: a gc may remove it while it is served", "version", v, "err", err)
		}
		return func() {}
	}
	e.log.Info("version pinned while this mount serves it", "version", v, "pin", pin.Path(), "renewed_every", store.PinLease/4)
	return func() {
		if err := pin.Close(); err != nil {
			e.log.Warn("unpin", "version", v, "err", err)
		}
	}
}
