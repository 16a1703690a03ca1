package s3

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/backendtest"
)

// TestS3BackendContract runs the backend contract suite against S3 on the test server: each
// backend has its own cache directory, as each process has, and the writer holds the lease.
// The part size is the smallest and packs past 1 MiB are moved in parts, so that the suite's
// pack of several MiB goes up in parts and comes down by parallel ranged GETs.
func TestS3BackendContract(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	n := 0
	backendtest.Run(t, func(t *testing.T) backendtest.Opener {
		n++
		url := fmt.Sprintf("s3://weightfs-test/contract-%d", n)
		if err := Init(url, Config{}, nil); err != nil {
			t.Fatal(err)
		}
		return func(t *testing.T, writer bool) store.Backend {
			c, err := setup(url, Config{RetryFor: 2 * time.Second, PartSize: MinPartSize}, logtest.New(t.Logf))
			if err != nil {
				t.Fatal(err)
			}
			var ls *lease
			if writer {
				if ls, err = acquireLease(context.Background(), c, logtest.New(t.Logf), time.Now); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ls.release() })
			}
			b, err := newBackend(c, t.TempDir(), writer, ls, logtest.New(t.Logf))
			if err != nil {
				t.Fatal(err)
			}
			b.packWhole = 1 << 20
			return b
		}
	})
}
