package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/weightfs/weightfs/delta"
)

// Deltas applied block by block for reads. A page of a tensor is a part of a delta block
// (1 MiB of bf16 is half of a 2^20-element block), so rebuilding pages in order would decode
// every block of every delta on the way more than once; decoded blocks are cached instead
// (objectStore.blocks), and concurrent builds of the same page wait for one another (objectStore.page).

// blockKey names one block of the delta section of one object.
type blockKey struct {
	id    ID
	block int64
}

// applySteps applies the delta sections of the steps' objects, in order, to buf, which holds
// content elements [first, first+len(buf)/width) of the object the first step starts from.
func (o *objectStore) applySteps(steps []planStep, buf []byte, first int64) error {
	var blocks []delta.BlockStep
	var held []*cachedBlock
	defer func() {
		for _, cb := range held {
			cb.release()
		}
	}()
	for _, st := range steps {
		d, err := o.loadDelta(st.obj)
		if errors.Is(err, errStale) {
			o.forgetMeta(st.obj)
		}
		if err != nil {
			return err
		}
		w := int64(d.info.Width)
		n := int64(len(buf)) / w
		if first < 0 || first+n > d.info.Elements || int64(len(buf))%w != 0 {
			return objectError(st.obj, fmt.Errorf("delta of %d elements of %d bytes applied to elements [%d, %d): %w",
				d.info.Elements, w, first, first+n, ErrCorrupt))
		}
		lo, hi := d.parsed.BlockRange(first, n)
		for b := lo; b <= hi; b++ {
			cb, err := o.decodedBlock(st.obj, d, b)
			if err != nil {
				return err
			}
			held = append(held, cb)
			blocks = append(blocks, delta.BlockStep{Block: cb.db, Dir: st.dir})
		}
	}
	if err := delta.ApplySteps(buf, first, blocks); err != nil {
		return fmt.Errorf("apply %d deltas: %v: %w", len(steps), err, ErrCorrupt)
	}
	return nil
}

// decodedBlock returns block b of the loaded delta d of object id, decoding it if needed. The
// caller holds a reference to it and must release it.
func (o *objectStore) decodedBlock(id ID, d *deltaObject, b int64) (*cachedBlock, error) {
	return o.decodedBlockOn(id, d, b, nil)
}

// decodedBlockOn is decodedBlock for a decode that the decodes of the sections in path wait
// on (each needing the next one's block b as its context): a block of a section on path is a
// cycle of contexts (object_delta_context.go), damage, refused before it could wait on its own decode.
func (o *objectStore) decodedBlockOn(id ID, d *deltaObject, b int64, path []ID) (*cachedBlock, error) {
	if slices.Contains(path, id) || len(path) > maxContextRead {
		return nil, errContextCycle(id, b, path)
	}
	key := blockKey{id, b}
	if cb, ok := o.blocks.get(key); ok {
		return cb, nil
	}
	var built *cachedBlock // the decoding caller's, with its reference
	_, err, _ := o.blockFlight.Do(flightKey(id, b), func() (any, error) {
		if o.blocks.has(key) {
			return nil, nil
		}
		cb, err := o.bufs.decodeBlock(id, d, b, path)
		if err != nil {
			return nil, err
		}
		o.blocks.add(key, cb, cb.db.MemoryBytes())
		built = cb
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	if built != nil {
		return built, nil
	}
	// Decoded by another caller: take a reference in the cache, or, if it was pushed out
	// already (a small cache), decode one of our own.
	if cb, ok := o.blocks.get(key); ok {
		return cb, nil
	}
	return o.bufs.decodeBlock(id, d, b, path)
}

// flightKey is the singleflight key of (object, number): a page or a block.
func flightKey(id ID, n int64) string {
	var b [len(ID{}) + 8]byte
	copy(b[:], id[:])
	binary.LittleEndian.PutUint64(b[len(id):], uint64(n))
	return string(b[:])
}
