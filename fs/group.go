package fs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"sync"
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
	return rankVersions{storeVersions{s}, wait, &sync.Map{}}
}

type rankVersions struct {
	storeVersions
	wait time.Duration
	// sealed holds the parts this process sealed whose wait for the publisher failed
	// (ETIMEDOUT): version -> the files' SHA-256 by path. Closing DONE again waits again.
	sealed *sync.Map
}

// SealedElsewhere: the group's publisher seals the versions a rank writes, so a rank's mount
// polls for them (pollMode).
func (b rankVersions) SealedElsewhere() bool { return true }

// CommitPatch: a rank writes its part of a version; its publisher seals versions, so a patch
// has nowhere to go (patches/ refuses it on a rank's mount).
func (b rankVersions) CommitPatch(io.ReaderAt, int64, uint64) (store.VersionInfo, error) {
	return store.VersionInfo{}, fmt.Errorf("a rank of a writer group takes no patch: %w", errors.ErrUnsupported)
}

// CommitSlimeDelta: as CommitPatch, a rank's deltas/ takes no delta.
func (b rankVersions) CommitSlimeDelta([]byte, store.SlimeShardOpener, uint64) (store.VersionInfo, error) {
	return store.VersionInfo{}, fmt.Errorf("a rank of a writer group takes no delta: %w", errors.ErrUnsupported)
}

// CommitSlimeDeltaOnSeed: as CommitPatch, a rank's deltas/ takes no delta.
func (b rankVersions) CommitSlimeDeltaOnSeed(string, []byte, store.SlimeShardOpener, uint64) (store.VersionInfo, error) {
	return store.VersionInfo{}, fmt.Errorf("a rank of a writer group takes no delta: %w", errors.ErrUnsupported)
}

// rankPoll is how often a rank that sealed its part looks for the published version.
const rankPoll = 50 * time.Millisecond

func (b rankVersions) NewVersion(v uint64) (VersionWriter, error) {
	if hashes, ok := b.sealed.Load(v); ok {
		return &sealedPart{b: b, v: v, hashes: hashes.(map[string]store.ID), seen: map[string]bool{}}, nil
	}
	w, err := b.s.NewPart(v)
	if err != nil {
		return nil, err
	}
	return &rankWriter{Writer: w, b: b}, nil
}

// wait waits, within the mount's bound, until the group has published version v.
func (b rankVersions) waitPublished(v uint64) (store.VersionInfo, error) {
	ctx := context.Background()
	if b.wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.wait)
		defer cancel()
	}
	info, err := b.s.WaitPublished(ctx, v, rankPoll)
	if errors.Is(err, context.DeadlineExceeded) {
		// The part stays sealed: closing DONE again waits again (sealedPart).
		return store.VersionInfo{}, fmt.Errorf("waited %v for the group's publisher (the part stays sealed; close DONE again to wait again): %w (%w)", b.wait, err, syscall.ETIMEDOUT)
	}
	b.sealed.Delete(v)
	if errors.Is(err, store.ErrGroupMismatch) {
		// Not published with this rank's part (another group's version, one above it): as
		// a refusal, the save is not in the store.
		err = fmt.Errorf("%w (%w)", err, syscall.ECANCELED)
	}
	return info, err
}

// rankWriter is a rank's part as a VersionWriter: the store.Writer's own methods, each file
// owned by the rank before it is added.
type rankWriter struct {
	*store.Writer
	b rankVersions
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
// refusal (store.ErrGroupRefused) and a version published without this rank's part
// (store.ErrGroupMismatch: a mistyped group name) reach the close as ECANCELED, the bound as
// ETIMEDOUT.
func (w *rankWriter) Seal() (store.VersionInfo, error) {
	v := w.Version()
	info, err := w.SealPart()
	if err != nil {
		return store.VersionInfo{}, err
	}
	w.b.sealed.Store(v, info.Hashes)
	return w.b.waitPublished(v)
}

// sealedPart is version v of a rank that sealed its part already, its wait for the publisher
// cut short (ETIMEDOUT): closing DONE again only waits again. The files must be the part's,
// byte for byte (their SHA-256): a file changed, added or removed since is refused, since the
// part cannot change any more (the group writes the save under a higher number).
type sealedPart struct {
	b      rankVersions
	v      uint64
	hashes map[string]store.ID
	seen   map[string]bool
}

func (p *sealedPart) check(path string, sum store.ID) error {
	want, ok := p.hashes[path]
	switch {
	case !ok:
		return fmt.Errorf("version %d: file %s is not in the part this rank sealed at the first close of DONE; the part cannot change (write the save under a higher number): %w (%w)", p.v, path, store.ErrGroupMismatch, syscall.EINVAL)
	case sum != want:
		return fmt.Errorf("version %d: file %s changed since this rank sealed its part at the first close of DONE; the part cannot change (write the save under a higher number): %w (%w)", p.v, path, store.ErrGroupMismatch, syscall.EINVAL)
	}
	p.seen[path] = true
	return nil
}

func (p *sealedPart) AddDir(string, iofs.FileMode) error { return nil }

func (p *sealedPart) AddFile(path string, r io.ReaderAt, size int64, _ iofs.FileMode) error {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
		return fmt.Errorf("version %d: read %s: %w", p.v, path, err)
	}
	return p.check(path, store.ID(h.Sum(nil)))
}

// StreamFile: a sealed part takes no new stream.
func (p *sealedPart) StreamFile(hint string) (*store.FileStream, error) {
	return nil, fmt.Errorf("version %d: the part is sealed: %w", p.v, store.ErrGroupMismatch)
}

// MaterializeInBackground: the part was sealed already; nothing is left to materialize.
func (p *sealedPart) MaterializeInBackground() {}

// Reset: a sealed part does not start over; after a failed wait it is aborted (a no-op),
// and the next close of DONE gets it again from NewVersion.
func (p *sealedPart) Reset() error {
	return fmt.Errorf("version %d: the part is sealed: %w", p.v, errors.ErrUnsupported)
}

// AddStream compares a file whose stream went into the part (addStreamLocked passes it
// unclosed: the stream ended with the part's Writer).
func (p *sealedPart) AddStream(path string, st *store.FileStream, _ iofs.FileMode) error {
	sum, ok := st.SHA256()
	if !ok {
		return fmt.Errorf("version %d: file %s was not whole when the part was sealed: %w (%w)", p.v, path, store.ErrGroupMismatch, syscall.EINVAL)
	}
	return p.check(path, sum)
}

func (p *sealedPart) Seal() (store.VersionInfo, error) {
	for path := range p.hashes {
		if !p.seen[path] {
			return store.VersionInfo{}, fmt.Errorf("version %d: file %s of the part this rank sealed is gone; the part cannot change (write the save under a higher number): %w (%w)", p.v, path, store.ErrGroupMismatch, syscall.EINVAL)
		}
	}
	return p.b.waitPublished(p.v)
}

func (p *sealedPart) Abort() error { return nil }
