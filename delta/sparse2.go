package delta

import "fmt"

// Version 2 of the delta body (docs/format.md Part II, "Version 2"): the same header and block
// table as version 1, but each block is coded against block b of a context, the decoded delta
// whose result is this delta's base (the previous step of the same tensor). Elements the
// context changed change again far more often than the others and mostly the same way, so
// the positions and values of the two classes are coded apart. Block b needs only block b of
// the context, so random access per block stays; each block records the context block's change
// count and checksum, so a wrong context is detected (ErrContextMismatch), never decoded into
// wrong bytes.

// ContextFunc returns block b (same block shift) of the decoded delta a version-2 body was
// coded against. The callee keeps ownership of the block; the caller does not keep it past
// its use. It is called only for blocks the body has changes in.
type ContextFunc func(b int64) (*DecodedBlock, error)

// SetContext makes the encoder write a version-2 body coded against ctx. It must be called
// before the first Add, AddChanges or AddDiff (ErrInvalidArgument otherwise); with ctx nil the
// body stays version 1. The encoder asks ctx for block b when it codes block b, which it does
// only for blocks with changes; an error from ctx, or a block that cannot be block b of a
// context of this tensor (ErrContextMismatch), is the encoder's error.
func (e *DeltaEncoder) SetContext(ctx ContextFunc) {
	if e.err != nil {
		return
	}
	if e.block >= 0 || e.changed > 0 || e.next > 0 || e.done {
		e.err = fmt.Errorf("delta encoder: %w: SetContext after the first change", ErrInvalidArgument)
		return
	}
	e.ctx = ctx
	version := byte(deltaVersion)
	if ctx != nil {
		version = deltaVersion2
		if e.cur2 == nil {
			e.cur2 = block2Encoders.Get().(*block2Encoder)
		}
	}
	e.out[4] = version
}

// appendBlock2 codes the block being collected as a version-2 block against the context's
// block and appends it to the output.
func (e *DeltaEncoder) appendBlock2() ([]byte, error) {
	ctx, err := e.ctx(e.block)
	if err != nil {
		return e.out, fmt.Errorf("context: %w", err)
	}
	blockLen := uint64(min(int64(1)<<e.shift, e.elements-e.block<<e.shift))
	if err := checkContext(ctx, e.block, e.shift, e.width, e.values.float, blockLen); err != nil {
		return e.out, err
	}
	return e.cur2.appendBlock(e.out, e.cur, ctx, blockLen, e.values)
}

// decodeWith decodes block b of the body l (payload, count changes) against block b of ctx:
// into into's compact form (the fast decoder), or with into nil for unpack (the reference).
func (d *block2Decoder) decodeWith(ctx ContextFunc, b int64, l *deltaLayout, payload []byte, count int, into *DecodedBlock) error {
	if ctx == nil {
		return ErrNoContext
	}
	cb, err := ctx(b)
	if err != nil {
		return fmt.Errorf("context: %w", err)
	}
	if err := checkContext(cb, b, l.shift, l.Width, l.Float, l.blockLen(b)); err != nil {
		return fmt.Errorf("%w (%w)", err, ErrMalformed)
	}
	if into != nil {
		return d.decodeInto(payload, count, l.blockLen(b), cb, into)
	}
	return d.decode(payload, count, l.blockLen(b), cb)
}

// NeedsContext reports whether the body is version 2: its blocks decode only with SetContext.
func (d *Delta) NeedsContext() bool { return d.l.Version >= 2 }

// SetContext gives a version-2 delta its context for DecodeBlock and DecodeBlockInto. It is
// not safe to call while blocks are being decoded: call it once, after OpenDelta and before
// the delta is shared; DecodeBlockContext takes a context per call instead. A version-1 delta
// ignores it.
func (d *Delta) SetContext(ctx ContextFunc) { d.ctx = ctx }

// DecodeBlockContext is DecodeBlockInto with ctx as the context of a version-2 body instead of
// the one SetContext gave (ctx nil: that one).
func (d *Delta) DecodeBlockContext(b int64, ctx ContextFunc, into *DecodedBlock) (*DecodedBlock, error) {
	if ctx == nil {
		ctx = d.ctx
	}
	return d.decodeBlock(b, ctx, into)
}

// ApplyDeltaContext is ApplyDelta for a body of either version: a version-2 body is decoded
// against ctx (nil: ErrNoContext), a version-1 body ignores it.
func ApplyDeltaContext(body []byte, ctx ContextFunc, dst []byte, first int64, dir Direction) error {
	return applyDelta(body, ctx, dst, first, dir)
}

// Start is the element index of the block's first element: positions are relative to it.
func (b *DecodedBlock) Start() int64 { return b.start }

// Position is the position of change i (0 <= i < Changes()) relative to Start, ascending in i.
func (b *DecodedBlock) Position(i int) uint32 { return b.pos[i] }

// Code is the value code of change i: the zigzag of its ordered difference (docs/format.md
// Part II, "Values"), never 0.
func (b *DecodedBlock) Code(i int) uint64 { return b.code(i) }

// Width is the element width of the delta the block came from.
func (b *DecodedBlock) Width() int { return b.width }

// AsContext returns the ContextFunc that decodes block b of d (with d's own context, for a
// version-2 d): what an encoder or a delta coded against d takes. Each call decodes anew into a
// new block; a caller that reads many blocks caches them itself. A block past d's table is
// ErrContextMismatch (and ErrMalformed): d is not the context of a body that has it.
func (d *Delta) AsContext() ContextFunc {
	return func(b int64) (*DecodedBlock, error) {
		if b < 0 || b >= d.l.blocks {
			return nil, fmt.Errorf("%w (%w): the context has no block %d (it has %d)", ErrContextMismatch, ErrMalformed, b, d.l.blocks)
		}
		return d.DecodeBlock(b)
	}
}
