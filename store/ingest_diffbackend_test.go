package store

import (
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"math/rand/v2"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// referenceBackend is a DiffBackend other than the CPU one (as the GPU's is): the store then
// takes the list of changes and adds it to the encoder, rather than AddDiff's fused path.
type referenceBackend struct{}

func (referenceBackend) Name() string { return "reference" }
func (referenceBackend) Diff(base, cur []byte, width int, out *delta.Changes) error {
	return delta.ReferenceDiff(base, cur, width, out)
}

// TestDiffBackendsStoreTheSame ingests the same series with the CPU backend (AddDiff) and
// with a listing backend, through both ingest paths: every manifest and object must be equal.
func TestDiffBackendsStoreTheSame(t *testing.T) {
	versions := streamSeries(t, 4, 7)
	quiet := func(string, ...any) {}
	cpu, _ := newStore(t, Options{MaxChain: 2, Logger: logtest.New(quiet)})
	listBatch, _ := newStore(t, Options{MaxChain: 2, Logger: logtest.New(quiet), Diff: referenceBackend{}})
	listStream, _ := newStore(t, Options{MaxChain: 2, Logger: logtest.New(quiet), Diff: referenceBackend{}})
	rng := rand.New(rand.NewPCG(8, 9))
	for i, files := range versions {
		v := uint64(i + 1)
		sealBatch(t, cpu, v, files)
		sealBatch(t, listBatch, v, files)
		sealStreamed(t, listStream, v, files, rng)
		sameStores(t, fmt.Sprintf("v%d, batch", v), cpu, listBatch, v)
		sameStores(t, fmt.Sprintf("v%d, streamed", v), cpu, listStream, v)
	}
}
