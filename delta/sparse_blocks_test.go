package delta

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// applyByBlocks is ApplyDelta through the block path: every block the range touches decoded
// (into the buffers of the one before, as the store recycles them) and applied with
// DecodedBlock.Apply.
func applyByBlocks(d *Delta, dst []byte, first int64, dir Direction) error {
	lo, hi := d.BlockRange(first, int64(len(dst)/d.Info().Width))
	var spare *DecodedBlock
	for b := lo; b <= hi; b++ {
		db, err := d.DecodeBlockInto(b, spare)
		if err != nil {
			return err
		}
		spare = db
		if err := db.Apply(dst, first, dir); err != nil {
			return err
		}
	}
	return nil
}

// checkBlockPath applies body over random ranges in both directions through ApplyDelta and
// through the block path, starting from the same random bytes, and requires equal results.
func checkBlockPath(t *testing.T, rng *rand.Rand, body []byte) {
	t.Helper()
	d, err := OpenDelta(body)
	if err != nil {
		t.Fatalf("OpenDelta: %v", err)
	}
	info := d.Info()
	if pinfo, _ := ParseDelta(body); pinfo != info {
		t.Fatalf("OpenDelta info %+v, ParseDelta %+v", info, pinfo)
	}
	w, n := info.Width, info.Elements
	for i := range 12 {
		lo, hi := int64(0), n
		if i > 0 && n > 0 {
			lo = rng.Int64N(n + 1)
			hi = lo + rng.Int64N(n-lo+1)
		}
		dir := Direction(i % 2)
		src := randomBytes(rng, int(hi-lo)*w)
		want, got := bytes.Clone(src), bytes.Clone(src)
		if err := ApplyDelta(body, want, lo, dir); err != nil {
			t.Fatalf("ApplyDelta [%d, %d): %v", lo, hi, err)
		}
		if err := applyByBlocks(d, got, lo, dir); err != nil {
			t.Fatalf("block path [%d, %d): %v", lo, hi, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("block path and ApplyDelta differ on elements [%d, %d) direction %d", lo, hi, dir)
		}
	}
}

func TestBlockPathMatchesApplyDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	cases := []struct {
		name  string
		width int
		float bool
		shift uint
		n     int
		frac  float64
	}{
		{"bf16 one block", 2, true, defaultBlockShift, 5000, 0.03},
		{"bf16 many blocks", 2, true, minBlockShift, 20000, 0.025},
		{"bf16 dense", 2, true, 8, 4000, 0.9},
		{"fp32", 4, true, 7, 9000, 0.05},
		{"int8", 1, false, 6, 3000, 0.2},
		{"fp64", 8, true, 9, 3000, 0.1},
		{"int16", 2, false, 6, 3000, 0.1},
		{"no changes", 2, true, 6, 1000, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := randomBytes(rng, c.n*c.width)
			cur := changeValues(rng, base, c.width, c.float, c.frac)
			body, err := encodeDeltaShift(nil, base, cur, c.width, c.float, c.shift)
			if err != nil {
				t.Fatal(err)
			}
			checkBlockPath(t, rng, body)
		})
	}
}

func TestDecodedBlockBadArguments(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	base := randomBytes(rng, 2*1000)
	body, err := encodeDeltaShift(nil, base, changeValues(rng, base, 2, true, 0.1), 2, true, 6)
	if err != nil {
		t.Fatal(err)
	}
	d, err := OpenDelta(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []int64{-1, 16, 1 << 40} {
		if _, err := d.DecodeBlock(b); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("DecodeBlock(%d) = %v, want ErrInvalidArgument", b, err)
		}
	}
	db, err := d.DecodeBlock(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dst   []byte
		first int64
		dir   Direction
	}{{make([]byte, 3), 0, Forward}, {make([]byte, 4), -1, Forward}, {make([]byte, 4), 0, Direction(2)}} {
		if err := db.Apply(c.dst, c.first, c.dir); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Apply(%d bytes, %d, %d) = %v, want ErrInvalidArgument", len(c.dst), c.first, c.dir, err)
		}
	}
	if lo, hi := d.BlockRange(0, 0); hi >= lo {
		t.Errorf("BlockRange of nothing = %d..%d", lo, hi)
	}
	if lo, hi := d.BlockRange(999, 10); lo != 15 || hi != 15 {
		t.Errorf("BlockRange(999, 10) = %d..%d, want 15..15 (clipped to the tensor)", lo, hi)
	}
}

// TestApplyStepsMatchesApplyDelta walks a chain of versions forward and backward over random
// ranges with ApplySteps and with ApplyDelta one delta after another.
func TestApplyStepsMatchesApplyDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct {
		width int
		float bool
		shift uint
	}{{2, true, 8}, {2, true, defaultBlockShift}, {4, true, 7}, {1, false, 6}, {8, false, 9}} {
		n := 40000 / c.width
		versions := [][]byte{randomBytes(rng, n*c.width)}
		var deltas []*Delta
		var bodies [][]byte
		for range 6 {
			prev := versions[len(versions)-1]
			cur := changeValues(rng, prev, c.width, c.float, 0.05)
			body, err := encodeDeltaShift(nil, prev, cur, c.width, c.float, c.shift)
			if err != nil {
				t.Fatal(err)
			}
			d, err := OpenDelta(body)
			if err != nil {
				t.Fatal(err)
			}
			versions, deltas, bodies = append(versions, cur), append(deltas, d), append(bodies, body)
		}
		for trial := range 20 {
			lo := rng.IntN(n + 1)
			hi := lo + rng.IntN(n-lo+1)
			if trial == 0 {
				lo, hi = 0, n
			}
			dir := Direction(trial % 2)
			order := []int{0, 1, 2, 3, 4, 5}
			from, to := versions[0], versions[6]
			if dir == Backward {
				slices.Reverse(order)
				from, to = to, from
			}
			var steps []BlockStep
			want := bytes.Clone(from[lo*c.width : hi*c.width])
			for _, k := range order {
				if err := ApplyDelta(bodies[k], want, int64(lo), dir); err != nil {
					t.Fatal(err)
				}
				blo, bhi := deltas[k].BlockRange(int64(lo), int64(hi-lo))
				for b := blo; b <= bhi; b++ {
					db, err := deltas[k].DecodeBlock(b)
					if err != nil {
						t.Fatal(err)
					}
					steps = append(steps, BlockStep{db, dir})
				}
			}
			got := bytes.Clone(from[lo*c.width : hi*c.width])
			if err := ApplySteps(got, int64(lo), steps); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) || !bytes.Equal(got, to[lo*c.width:hi*c.width]) {
				t.Fatalf("width %d shift %d: ApplySteps over [%d, %d) direction %d differs", c.width, c.shift, lo, hi, dir)
			}
		}
	}
}

func TestApplyStepsRefusesMixedWidths(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	var blocks []*DecodedBlock
	for _, w := range []int{2, 4} {
		base := randomBytes(rng, w*500)
		body, err := encodeDeltaShift(nil, base, changeValues(rng, base, w, true, 0.1), w, true, 9)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := OpenDelta(body)
		db, err := d.DecodeBlock(0)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, db)
	}
	dst := make([]byte, 2000)
	err := ApplySteps(dst, 0, []BlockStep{{blocks[0], Forward}, {blocks[1], Forward}})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("mixed widths: %v, want ErrInvalidArgument", err)
	}
	if !bytes.Equal(dst, make([]byte, 2000)) {
		t.Fatal("a refused ApplySteps changed dst")
	}
}

// TestDecodeBlockIntoAnotherDeltasBlock reuses blocks across deltas of other widths and
// densities: the refilled block applies exactly like a new one.
func TestDecodeBlockIntoAnotherDeltasBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	type source struct {
		width int
		float bool
		frac  float64
	}
	var deltas []*Delta
	for _, src := range []source{{2, true, 0.3}, {4, true, 0.01}, {2, true, 0}, {1, false, 0.5}, {2, false, 0.05}} {
		n := 3000 + rng.IntN(3000)
		base := randomBytes(rng, n*src.width)
		cur := bytes.Clone(base)
		for i := range n {
			if rng.Float64() < src.frac {
				cur[i*src.width] ^= byte(1 + rng.IntN(255))
			}
		}
		body, err := EncodeDelta(nil, base, cur, src.width, src.float)
		if err != nil {
			t.Fatal(err)
		}
		d, err := OpenDelta(body)
		if err != nil {
			t.Fatal(err)
		}
		deltas = append(deltas, d)
	}
	var spare *DecodedBlock
	for round := range 20 {
		d := deltas[rng.IntN(len(deltas))]
		fresh, err := d.DecodeBlock(0)
		if err != nil {
			t.Fatal(err)
		}
		reused, err := d.DecodeBlockInto(0, spare)
		if err != nil {
			t.Fatal(err)
		}
		if spare != nil && reused != spare {
			t.Fatal("DecodeBlockInto did not refill the block it was given")
		}
		w := d.Info().Width
		dst := randomBytes(rng, int(d.Info().Elements)*w)
		want, got := bytes.Clone(dst), bytes.Clone(dst)
		if err := fresh.Apply(want, 0, Backward); err != nil {
			t.Fatal(err)
		}
		if err := reused.Apply(got, 0, Backward); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) || reused.Changes() != fresh.Changes() {
			t.Fatalf("round %d: the refilled block (%d changes) applies differently from a new one (%d)", round, reused.Changes(), fresh.Changes())
		}
		spare = reused
	}
}
