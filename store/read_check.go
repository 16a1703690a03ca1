package store

import (
	"crypto/sha256"
	"fmt"
	"hash"

	"github.com/zeebo/xxh3"
)

// Per-tensor checks (docs/design.md, "What the checks guard against"). A manifest names each
// tensor's object, and an object's identity is the SHA-256 of its content: the raw bytes of
// the tensor (or of the file's header, or of a whole blob). A manifest of format 4 also keeps
// each tensor's xxh3-128 of the same bytes, computed by the writer in the pass that computed
// the identity. The manifest itself is checked (its CRC-32C, the version it names) and binds
// each identity and digest to its file, name and offsets. So a read of a file through OpenFile
// serves the bytes of an object rebuilt from the store's objects (a whole object's chunks, a
// chain of deltas replayed onto a whole copy) only once the object's whole content, rebuilt by
// the same read path, has been hashed and found equal to the tensor's xxh3-128 where its
// manifest keeps one (objHint.xxh), else to its identity: per tensor, never per file, so no
// read waits for a pass over a whole file. Under the threat model (damage, bugs, mistakes; not
// one who recomputes checksums) the two are as strong: a 128-bit digest of the bytes, bound by
// the checked manifest to the tensor; xxh3 runs at memory speed where SHA-256 was 16-18% of an
// old version's read. verify still hashes every object with SHA-256 (the deep check), and
// each tensor with its xxh3-128 too.
//
// The codec keeps no digest of a part of a tensor, so the first read of any byte of a tensor
// hashes the whole tensor (its pages are built ahead by the read-ahead's builders and then
// served from the page cache). A sequential reader's read-ahead starts the checks of the next
// tensors before it reaches them (objectStore.checkAhead, read_ahead.go), so their hashes run
// on other cores while it is served. An object checked once is remembered (checks.checkedObject: in
// memory, and in the index of the cache directory, bucket vouched, so a restarted reader does
// not hash it again); one that does not hash to its identity fails every read of it with
// ErrCorrupt naming the file, the tensor and the object, never wrong bytes. Bytes served from
// the materialized copy or a file copy are not hashed again: those caches hold bytes checked
// when they were written, and every read of them checks their CRC-32C sums.
//
// What this does not guard against is one who can write the store and recompute its
// checksums (a manifest whose tensor identities were swapped, its CRC recomputed): that needs
// a secret key. The whole-file check of today's reference (readOpts.vouch, verify_vouch.go)
// is kept for the tests that compare the two.

// checkAhead is how many pages of an object being checked are built ahead of its hash.
const checkAhead = 8

// checkTensor returns nil once the content of object id, as the read path rebuilds it, hashes
// to id. hint names the file and tensor for the error and for the read path's backward walk.
// Concurrent first reads hash an object once.
func (c *checker) checkTensor(id ID, hint objHint) error {
	chk := c.st.mat.contentChecks()
	if chk.checkedObject(id) {
		return nil
	}
	if err := chk.failedVouch(id); err != nil {
		return err
	}
	_, err, _ := chk.flight.Do("object:"+string(id[:]), func() (any, error) {
		if chk.checkedObject(id) {
			return nil, nil
		}
		got, err := c.hashTensor(id, hint)
		if isDamage(err) {
			// What this process cached of the object's chain may predate another process's
			// gc (read_reload.go): once more from the files, as the reads themselves do.
			n := c.st.objects.forgetObjects(id, hint)
			c.st.log.Info("check of a tensor failed with what was cached of its objects; reading them again", "object", id, "objects", n, "err", err)
			got, err = c.hashTensor(id, hint)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", describeObject(hint), err)
		}
		if want := hint.want(id); got != want {
			what := describeObject(hint)
			c.st.log.Warn(fmt.Sprintf("%s: its object %s rebuilds to content whose %s is %s, not %s: every read of it fails (damage; run weightfs verify)", what, id, got.kind, got, want))
			err := fmt.Errorf("%s: object %s rebuilds to content whose %s is %s, not %s: %w", what, id, got.kind, got, want, ErrCorrupt)
			chk.noteFailedVouch(id, err)
			return nil, err
		}
		chk.noteCheckedObject(id)
		return nil, nil
	})
	return err
}

// digest is what a check compares: an object's SHA-256 (its id) or a tensor's xxh3-128 (in
// the first 16 bytes), and which.
type digest struct {
	kind string // "SHA-256" or "xxh3-128"
	sum  ID
}

func (d digest) IsZero() bool { return d.kind == "" }

func (d digest) String() string {
	if d.kind == "xxh3-128" {
		return xxh3Digest(d.sum[:16]).String()
	}
	return d.sum.String()
}

// want is the digest a check of object id read for hint compares with: the tensor's xxh3-128
// where its manifest keeps one, else the id.
func (h objHint) want(id ID) digest {
	if !h.xxh.IsZero() {
		var d digest
		d.kind = "xxh3-128"
		copy(d.sum[:], h.xxh[:])
		return d
	}
	return digest{"SHA-256", id}
}

// hashTensor hashes object id's content as the read path rebuilds it, with hint's digest.
// A digest that is not the wanted one is returned with a nil error (err only for a failed read).
func (c *checker) hashTensor(id ID, hint objHint) (digest, error) {
	m, err := c.st.objects.meta(id)
	if err != nil {
		return digest{}, err
	}
	want := hint.want(id)
	var h hash.Hash = sha256.New()
	if want.kind == "xxh3-128" {
		h = xxh3.New128()
	}
	// A length that is not the object's fails the hash (or the read past its end).
	if err := c.hashRebuilt(id, hint, m.ContentLen, h); err != nil {
		return digest{}, err
	}
	got := digest{kind: want.kind}
	h.Sum(got.sum[:0])
	return got, nil
}

// describeObject names where an object sits: a tensor of a file, a file's header, or a file.
func describeObject(hint objHint) string {
	switch {
	case hint.header:
		return fmt.Sprintf("the header of %s", hint.path)
	case hint.tensor != "":
		return fmt.Sprintf("tensor %s of %s", hint.tensor, hint.path)
	default:
		return hint.path
	}
}

// hashRebuilt writes content bytes [0, size) of object id to h, page by page through the
// shared page cache (the pages stay there for the reads that follow), with the pages ahead of
// the hash built by the read-ahead's builders.
func (c *checker) hashRebuilt(id ID, hint objHint, size int64, h hash.Hash) error {
	o := c.st.objects
	pages := (size + pageSize - 1) / pageSize
	ahead := int64(1) // the first page is built by the loop itself
	for pg := int64(0); pg < pages; pg++ {
		for ; o.readsAhead() && ahead < pages && ahead <= pg+checkAhead; ahead++ {
			if !o.hasPage(id, ahead) && !o.buildAhead(id, hint, ahead) {
				break // every builder is busy: built here when the hash gets there
			}
		}
		p, err := o.page(id, hint, pg, readOpts{})
		if err != nil {
			return err
		}
		if want := min(pageSize, size-pg*pageSize); int64(len(p.b)) != want {
			n := len(p.b)
			p.release()
			return objectError(id, fmt.Errorf("page %d of %d bytes, want %d: %w", pg, n, want, ErrCorrupt))
		}
		h.Write(p.b)
		p.release()
	}
	return nil
}
