package kernels

import (
	"sync"
	"sync/atomic"
)

// A Ranger processes the index range [lo, hi) of a parallel loop.
type Ranger interface {
	Range(lo, hi int)
}

// RangeFunc adapts a function to Ranger.
type RangeFunc func(lo, hi int)

// Range calls f(lo, hi).
func (f RangeFunc) Range(lo, hi int) { f(lo, hi) }

// Pool is a persistent set of worker goroutines for parallel loops. The
// calling goroutine takes part in every loop, so a Pool of n threads starts
// n-1 goroutines. A Pool serves one caller at a time: its methods must not
// be called concurrently (the engine runs one forward step at a time). Its
// loops do not allocate.
//
// Work is split by index, so kernels that compute each output element
// independently give the same bits for every thread count.
type Pool struct {
	threads int
	start   []chan struct{} // one per worker goroutine
	wg      sync.WaitGroup  // the workers of the loop in progress
	exited  sync.WaitGroup  // the worker goroutines, for Close
	closed  bool

	// The loop in progress, written before the workers are started.
	n, grain int
	r        Ranger
	next     atomic.Int64 // first index not yet claimed
	mm       matMulJob
}

// NewPool starts a pool of threads threads (at least 1).
func NewPool(threads int) *Pool {
	threads = max(1, threads)
	p := &Pool{threads: threads, start: make([]chan struct{}, threads-1)}
	p.exited.Add(threads - 1)
	for i := range p.start {
		p.start[i] = make(chan struct{}, 1)
		go p.worker(p.start[i])
	}
	return p
}

// Threads reports the number of threads, the caller included.
func (p *Pool) Threads() int { return p.threads }

// Close stops the worker goroutines and waits for them to exit. The pool
// must not be used afterwards; Close is idempotent.
func (p *Pool) Close() {
	if p.closed {
		return
	}
	p.closed = true
	for _, c := range p.start {
		close(c)
	}
	p.exited.Wait()
}

func (p *Pool) worker(start chan struct{}) {
	defer p.exited.Done()
	for range start {
		p.claim()
		p.wg.Done()
	}
}

// claim runs chunks of the current loop until none is left.
func (p *Pool) claim() {
	for {
		lo := int(p.next.Add(int64(p.grain))) - p.grain
		if lo >= p.n {
			return
		}
		p.r.Range(lo, min(lo+p.grain, p.n))
	}
}

// Do calls r.Range over [0, n) in chunks of grain indices (the last may be
// shorter), spread over the pool's threads, and returns when all are done.
// A grain below 1 means an even split, one chunk per thread. Do does not
// allocate: pass a Ranger that is a pointer to a reused value.
func (p *Pool) Do(n, grain int, r Ranger) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = (n + p.threads - 1) / p.threads
	}
	if p.threads == 1 || grain >= n {
		r.Range(0, n)
		return
	}
	p.n, p.grain, p.r = n, grain, r
	p.next.Store(0)
	workers := min(len(p.start), (n+grain-1)/grain-1)
	p.wg.Add(workers)
	for _, c := range p.start[:workers] {
		c <- struct{}{}
	}
	p.claim()
	p.wg.Wait()
	p.r = nil
}

// For calls fn over [0, n) split evenly into one contiguous chunk per
// thread. It does not allocate if fn is a func value made once and reused
// (a method value stored in a field, say); a closure literal written at the
// call site may be allocated by the compiler, because the pool keeps fn
// while the workers run.
func (p *Pool) For(n int, fn func(lo, hi int)) {
	p.Do(n, 0, RangeFunc(fn))
}

// matMulJob is Pool.MatMulT's loop body, kept in the Pool so that the
// interface conversion in Do does not allocate.
type matMulJob struct {
	c, a, w []float32
	m, n, k int
}

func (j *matMulJob) Range(lo, hi int) {
	matMulT(j.c[lo:], j.n, j.a, j.w[lo*j.k:], j.k, j.m, hi-lo, j.k)
}

// mmGrain is the column chunk of Pool.MatMulT: a multiple of every
// micro-kernel's width (1, 3, 4, 8), large enough to amortise a chunk's
// start-up, small enough to balance threads.
const mmGrain = 48

// MatMulT is the parallel MatMulT: the n output columns (rows of W) are
// split into chunks spread over the threads; each C element is computed
// exactly as by MatMulT. It panics under the same conditions.
func (p *Pool) MatMulT(c, a, w []float32, m, n, k int) {
	checkMatMulT(c, a, w, m, n, k)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:m*n])
		return
	}
	// Chunks of about an equal share per thread, rounded up to mmGrain.
	chunk := (n + p.threads - 1) / p.threads
	chunk = (chunk + mmGrain - 1) / mmGrain * mmGrain
	p.mm = matMulJob{c: c, a: a, w: w, m: m, n: n, k: k}
	p.Do(n, chunk, &p.mm)
	p.mm = matMulJob{}
}
