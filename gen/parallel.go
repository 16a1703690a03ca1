package gen

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// chunkElems is the unit of parallel work: big enough to amortise scheduling, small enough
// that a worker's streaming scratch (3 float32 arrays) stays in cache.
const chunkElems = 1 << 15

// workers resolves Config.Workers: 0 means all cores.
func (c Config) workers() int {
	if c.Workers > 0 {
		return c.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// parallelFor calls fn(worker, job) for every job in [0, jobs) on up to workers goroutines.
// Jobs are handed out in order from a shared counter; callers make each job's result
// independent of which worker runs it, so the output never depends on the worker count.
func parallelFor(workers, jobs int, fn func(worker, job int)) {
	workers = max(1, min(workers, jobs))
	if workers == 1 {
		for j := range jobs {
			fn(0, j)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := int(next.Add(1) - 1)
				if j >= jobs {
					return
				}
				fn(w, j)
			}
		}()
	}
	wg.Wait()
}

// rangeJob is a range [lo, hi) of elements of one tensor.
type rangeJob struct {
	tensor int
	lo, hi int64
}

// splitRanges cuts the tensors into jobs of at most chunkElems elements.
func splitRanges(tensors []tensorSpec) []rangeJob {
	var jobs []rangeJob
	for ti := range tensors {
		for lo := int64(0); lo < tensors[ti].numel; lo += chunkElems {
			jobs = append(jobs, rangeJob{ti, lo, min(lo+chunkElems, tensors[ti].numel)})
		}
	}
	return jobs
}
