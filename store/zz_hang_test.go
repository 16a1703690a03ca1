package store

import (
	"bytes"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"testing"
	"time"
)

func TestZZHang(t *testing.T) {
	s, _ := newStore(t, Options{MaxChain: 2, Logf: func(string, ...any) {}})
	sealBatch(t, s, 1, map[string][]byte{"f": safetensorsFile(t,
		testTensor{"a", "F32", []int64{4}, []byte("0123456789abcdef")},
		testTensor{"b", "BF16", []int64{8}, []byte("ABCDEFGHIJKLMNOP")})})
	seeds := [][]byte{safetensorsFile(t, testTensor{"a", "F32", []int64{4}, []byte("0123456789abcdeX")},
		testTensor{"b", "BF16", []int64{8}, []byte("ABCDEFGHIJKLMNOQ")}),
		rawSafetensors(`{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}`, []byte("12345678xyz")),
		[]byte("p\x00\x00\x00\x00\x00\x00\x00abcde:\"BF16\",HIJKLMNOa")}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		data := append([]byte(nil), seeds[rng.IntN(len(seeds))]...)
		for k := rng.IntN(4); k >= 0 && len(data) > 0; k-- {
			switch rng.IntN(3) {
			case 0:
				data[rng.IntN(len(data))] = byte(rng.Uint32())
			case 1:
				data = data[:rng.IntN(len(data))]
			case 2:
				data = append(data, byte(rng.Uint32()))
			}
		}
		if i%500 == 0 { println("iter", i) }
		done := make(chan struct{})
		go func() {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Logf("hang on %q", data)
				pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
				os.Exit(3)
			}
		}()
		for _, stream := range []bool{false, true} {
			w, _ := s.NewVersion(2)
			if stream {
				st, _ := w.StreamFile("f")
				for rest := data; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(40))
					st.Write(rest[:n])
					rest = rest[n:]
				}
				st.Close()
				w.AddStream("f", st, 0o644)
			} else {
				w.AddFile("f", bytes.NewReader(data), int64(len(data)), 0o644)
			}
			w.Abort()
		}
		close(done)
	}
}
