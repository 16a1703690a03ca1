package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"syscall"
	"time"

	"github.com/weightfs/weightfs/store"
)

// A mount of a writer group's rank (store.OpenRank; docs/format.md Part I §9): its open
// versions are the rank's parts. Each file is the rank's own from its first write
// (store.Writer.Own, so that its tensors diff against the same file's last version), and
// the close of DONE seals the part and returns once the group's publisher has published the
// version: from then on it is sealed here as anywhere.

// FromRank adapts a store opened as a rank of a writer group to VersionStore. wait bounds
// how long DONE's close waits for the publisher once the rank's part is sealed (0: no
// bound): past it the close fails with ETIMEDOUT and the log says which ranks have sealed
// (the part stays sealed; the version appears once a publisher publishes it).
func FromRank(s *store.Store, wait time.Duration) VersionStore {
	return rankVersions{storeVersions{s}, wait}
}

type rankVersions struct {
	storeVersions
	wait time.Duration
}

// rankPoll is how often a rank that sealed its part looks for the published version.
const rankPoll = 50 * time.Millisecond

func (b rankVersions) NewVersion(v uint64) (VersionWriter, error) {
	w, err := b.s.NewPart(v)
	if err != nil {
		return nil, err
	}
	return &rankWriter{Writer: w, s: b.s, wait: b.wait}, nil
}

// rankWriter is a rank's part as a VersionWriter (and a streamWriter, writerResetter,
// backgroundMaterializer: the store.Writer's own methods).
type rankWriter struct {
	*store.Writer
	s    *store.Store
	wait time.Duration
}

func (w *rankWriter) StreamFile(hint string) (*store.FileStream, error) {
	if err := w.Own(hint); err != nil {
		return nil, err
	}
	return w.Writer.StreamFile(hint)
}

func (w *rankWriter) AddStream(p string, st *store.FileStream, mode iofs.FileMode) error {
	if err := w.Own(p); err != nil {
		return err
	}
	return w.Writer.AddStream(p, st, mode)
}

func (w *rankWriter) AddFile(p string, r io.ReaderAt, size int64, mode iofs.FileMode) error {
	if err := w.Own(p); err != nil {
		return err
	}
	return w.Writer.AddFile(p, r, size, mode)
}

// Seal seals the rank's part and waits until the publisher has published the version. A
// refusal (store.ErrGroupRefused) reaches the close as ECANCELED, the bound as ETIMEDOUT.
func (w *rankWriter) Seal() (store.VersionInfo, error) {
	v := w.Version()
	if _, err := w.SealPart(); err != nil {
		return store.VersionInfo{}, err
	}
	ctx := context.Background()
	if w.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.wait)
		defer cancel()
	}
	info, err := w.s.WaitPublished(ctx, v, rankPoll)
	if errors.Is(err, context.DeadlineExceeded) {
		return store.VersionInfo{}, fmt.Errorf("waited %v for the group's publisher: %w (%w)", w.wait, err, syscall.ETIMEDOUT)
	}
	return info, err
}
