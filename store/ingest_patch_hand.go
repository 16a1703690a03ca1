package store

// The split pass's tensors handed to its hasher (issue 31, figure 14). The split pass
// (ingest_patch_split.go) makes a file's tensors on several goroutines while one more hashes
// the new file in order (its SHA-256, the copy's sums, the patch's xxh3-128 of the file and of
// its base). Reading the new file again for that hash costs a second read of every base byte
// (through the store's read path while the copy is deferred) and the patch laid over it a
// second time. But where the base in memory holds the base version, every tensor's new bytes
// are in memory once its goroutine made it: a changed tensor's in the buffer the memory keeps
// for the next version, an unchanged one's in the base's own entry (carried to the next
// version) or in its kept copy. So each goroutine hands its tensor's new bytes (and its base
// bytes, for base_xxh3) to the hasher, which hashes them where they lie; the hold on a base
// entry in memory is let go of, and the entry given up as the pass would, only once the
// hasher has hashed it (a buffer given back could be taken in by another tensor of the
// version). A tensor whose bytes are not in memory (the memory over its budget, a base read
// from the copy while base_xxh3 is to be hashed) is read again as before (hashPatchedTensor).
// The file's pass then costs about the one pass's CPU (two SHA-256 streams instead of one
// sha256x2 pass over the same bytes), spread over the cores: addPatchedFiles takes it where a
// file gets two cores or more and the memory holds the base version.

// tensorHand is one tensor of the split pass, from the goroutine that made it to the hasher.
type tensorHand struct {
	done chan struct{} // closed when the tensor was made (or failed)
	// newB is the tensor's new bytes in memory, baseB its base bytes (nil: not handed: the
	// hasher reads the tensor again); release, when set, is called once the hasher is done
	// with them (or the pass failed).
	newB, baseB []byte
	release     func()
}

// give hands the tensor's bytes to the hasher.
func (h *tensorHand) give(newB, baseB []byte, release func()) {
	if h != nil {
		h.newB, h.baseB, h.release = newB, baseB, release
	}
}

// giveUp calls the release of every hand whose hasher did not (the pass failed): after every
// goroutine of the pass returned.
func giveUp(hands []tensorHand) {
	for i := range hands {
		hands[i].letGo()
	}
}

// wait waits until the tensor was made, or until stop is closed (every maker returned), and
// says whether it was made.
func (h *tensorHand) wait(stop <-chan struct{}) bool {
	select {
	case <-h.done:
		return true
	case <-stop:
		select {
		case <-h.done:
			return true
		default:
			return false
		}
	}
}

// handed says whether the tensor's bytes, size of them, were handed with everything x needs
// (its base's too, where x hashes the base file). A nil hand: not handed.
func (h *tensorHand) handed(size int64, x *xxh3Claims) bool {
	return h != nil && h.newB != nil && int64(len(h.newB)) == size && (!x.needsBase() || len(h.baseB) == len(h.newB))
}

// letGo lets go of what the hand holds, once the hasher is done with the tensor (a nil hand:
// nothing).
func (h *tensorHand) letGo() {
	if h != nil && h.release != nil {
		r := h.release
		h.release = nil
		r()
	}
}

// needsBase says whether the claims hash the base file's bytes (base_xxh3 claimed, not known).
func (c *xxh3Claims) needsBase() bool { return c != nil && c.base != nil }
