package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sync/errgroup"
)

// The publisher's check of the parts' files: a part record names each file's objects and its
// SHA-256, and a rank's seal computed both from the same bytes, but nothing in the record
// ties them together (a damaged or forged record whose CRC was recomputed, a rank's bug). A
// version published from such a part would serve other bytes than its ranks wrote (reads check
// each tensor against its own identity, read_check.go, not the file's SHA-256) once it is the
// store's truth. So before publishing, every file of every part is read whole through the
// read path (each object checked as on any read) and hashed, as vouching does; a file whose
// composition (copy_sums.go) was vouched for already, by this process or in its index, is not
// read again: a file unchanged since the last version costs nothing.

// checkPartFiles checks that each file of each part hashes to its recorded SHA-256. A file
// that does not, or whose objects are damaged, is a refusal (RefusedDamaged) naming the rank
// and the file; an error reading the objects that is not damage (the disk, the bucket away)
// is returned as it is: the publish is tried again at the next poll.
func (w *Writer) checkPartFiles(group string, parts []*partRecord) error {
	s := w.s
	var all []manifestFile
	for _, p := range parts {
		all = append(all, p.Files...)
	}
	ver := newVersion(&manifest{Version: w.v, Files: all})
	chk := s.mat.contentChecks()
	var eg errgroup.Group
	eg.SetLimit(max(1, min(4, runtime.GOMAXPROCS(0))))
	for _, p := range parts {
		for i := range p.Files {
			f := ver.files[p.Files[i].Path]
			comp := composition(f)
			if chk.isVouched(comp) {
				continue
			}
			eg.Go(func() error {
				h := sha256.New()
				err := pipePass(s.newVersionFile(ver, f, readOpts{noMaterialized: true}), f.Size, h, nil, nil)
				if err != nil {
					err = fmt.Errorf("publish version %d of group %s: rank %d's file %s cannot be read from its objects: %w", w.v, group, p.Rank, f.Path, err)
					if errors.Is(err, ErrCorrupt) {
						return refusal(RefusedDamaged, []int{p.Rank}, err)
					}
					return err
				}
				var got ID
				h.Sum(got[:0])
				if got != f.SHA256 {
					return refusal(RefusedDamaged, []int{p.Rank}, fmt.Errorf("publish version %d of group %s: rank %d's file %s: its objects hash to %s, its part record says %s (a damaged or forged part): %w",
						w.v, group, p.Rank, f.Path, got, f.SHA256, ErrCorrupt))
				}
				chk.vouch(true, comp)
				return nil
			})
		}
	}
	return eg.Wait()
}
