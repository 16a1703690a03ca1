package store

import (
	"bytes"
	"errors"
	"github.com/weightfs/weightfs/internal/logtest"
	"math/rand/v2"
	"testing"
	"time"
)

// TestFinisherFailureReplaysQueuedTensors holds the first object put until the worker has
// handed the finisher more tensors, then fails it: the tensors queued behind the failed one
// are not stored, and Replay still gives back every byte the stream took.
func TestFinisherFailureReplaysQueuedTensors(t *testing.T) {
	versions := streamSeries(t, 3, 31)
	s, _ := newStore(t, Options{MaxChain: 8, Logger: logtest.New(func(string, ...any) {})})
	sealBatch(t, s, 1, versions[0])
	sealBatch(t, s, 2, versions[1])
	data := versions[2]["model.safetensors"]
	w, err := s.NewVersion(3)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	st, err := w.StreamFile("model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected")
	queued := 0
	s.hook = func(p string) error {
		if p != "stream-object-put" {
			return nil
		}
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			st.fin.mu.Lock()
			queued = len(st.fin.unstored)
			st.fin.mu.Unlock()
			if queued >= 2 {
				break
			}
		}
		return injected
	}
	rng := rand.New(rand.NewPCG(3, 4))
	accepted := 0
	for accepted < len(data) {
		n := min(1+rng.IntN(1<<16), len(data)-accepted)
		if _, err := st.Write(data[accepted : accepted+n]); err != nil {
			if !errors.Is(err, injected) {
				t.Fatalf("write: %v", err)
			}
			break
		}
		accepted += n
	}
	if err := st.Close(); !errors.Is(err, injected) {
		t.Fatalf("close after the failed put: %v, want the injected error", err)
	}
	if queued < 2 {
		t.Fatalf("the finisher held %d tensors when its put failed, want at least 2", queued)
	}
	stored, unstored := st.fin.progress()
	if stored != 0 || len(unstored) < 2 {
		t.Fatalf("after the failure: %d tensors stored, %d not, want 0 and at least 2", stored, len(unstored))
	}
	var got bytes.Buffer
	if err := st.Replay(&got); err != nil {
		t.Fatalf("replay: %v", err)
	}
	mustEqualBytes(t, "replayed", got.Bytes(), data[:accepted])
	s.hook = nil
}
