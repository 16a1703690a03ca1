package fs

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"syscall"
)

// UnmountOnSignals is a daemon's signal loop: each signal received on sigs (the daemon
// subscribes SIGTERM, SIGINT and SIGHUP) asks for an unmount, and it returns once the file
// system is unmounted, by a signal or by an external umount. An unmount the kernel refuses
// because the mount is busy (a process has a file, a mapping or its working directory in it)
// changes nothing: the mount keeps serving, the log says which processes hold it (a best
// effort from /proc), and the next signal tries again. A daemon that stopped listening after
// the first signal, or died of SIGHUP, would leave either a mount that no signal can end or a
// dead one ("transport endpoint is not connected") for every process still in it.
func (s *Server) UnmountOnSignals(sigs <-chan os.Signal, log *slog.Logger) {
	log = orDiscard(log)
	for {
		select {
		case <-s.done:
			return
		case sig := <-sigs:
			log.Info("unmounting", "signal", sig.String(), "mountpoint", s.mountpoint)
			err := s.Unmount()
			if err == nil {
				return
			}
			if !isBusy(err) {
				log.Warn("unmount failed (still serving; signal again to retry)", "err", err)
				continue
			}
			held := "no process found in /proc (another mount namespace, or already gone)"
			if hs := MountHolders(s.mountpoint); len(hs) > 0 {
				held = strings.Join(hs, "; ")
			}
			log.Warn("busy, still serving: signal again once they are done, or `umount -l "+s.mountpoint+"` to detach it",
				"mountpoint", s.mountpoint, "held_by", held)
		}
	}
}

// isBusy reports whether an unmount failed because the mount is in use: EBUSY from umount(2),
// or fusermount3's message for it.
func isBusy(err error) bool {
	return errors.Is(err, syscall.EBUSY) || strings.Contains(strings.ToLower(err.Error()), "busy")
}
