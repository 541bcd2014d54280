package kernels

import (
	"cmp"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
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
//
// A worker that finishes a loop spins for up to the pool's spin
// (DefaultSpin unless NewPool is told otherwise) for the next one, and a
// caller spins as long for its workers, before blocking: a decode
// step runs about ten loops per layer, tens to hundreds of microseconds
// apart, and a blocked worker comes back late. Waking it makes its
// goroutine runnable on the caller's processor, so it often runs there,
// after the caller, rather than beside it: with 50µs of spinning, the
// two threads of a 2-thread decode step ran mostly on one CPU, the other
// idle (perf sched on a 2-vCPU VM: 11% idle), and one streaming client
// got 12% fewer tokens per second than with 2ms. Past yieldAfter, a
// spinning waiter yields its processor every few microseconds
// (runtime.Gosched), so the process's other goroutines (the streams that
// deliver tokens, incoming requests) run in the gaps rather than wait up
// to 10ms to preempt it. A pool left idle blocks after its spin and takes
// no CPU.
type Pool struct {
	threads int
	spin    time.Duration // how long a waiter spins before blocking
	workers []waiter      // one per worker goroutine
	loop    atomic.Uint64 // loops started << 16 | workers taking part
	pending atomic.Int64  // workers of the loop in progress not yet done
	caller  waiter        // the caller, blocked on the last of them
	exited  sync.WaitGroup
	quit    atomic.Bool
	closed  bool

	// The loop in progress, written before loop is advanced.
	n, grain int
	r        Ranger
	next     atomic.Int64 // first index not yet claimed
	mm       matMulJob
	prep     prepareJob
	qa       []byte    // A quantized for a Q8 MatMulTW, reused
	abf      []uint16  // A rounded to bfloat16 for a BF16Dot MatMulTW, reused
	apad     []float32 // A at a padded row stride for MatMulTW, reused
}

// A waiter is a goroutine that may block on wake: it sets parked before
// it blocks, and whoever clears parked owes it one send on wake.
type waiter struct {
	parked atomic.Bool
	wake   chan struct{}
}

// notify unblocks w if it is blocked, or about to block.
func (w *waiter) notify() {
	if w.parked.CompareAndSwap(true, false) {
		w.wake <- struct{}{}
	}
}

// await returns once done() holds: it spins for spin, then blocks
// until notified. A notify can come late (from a loop this waiter already
// saw done, its notifier delayed past the end of that loop), so done() is
// checked again after every wake-up.
func (w *waiter) await(done func() bool, spin time.Duration) {
	t0 := time.Now()
	for i := 1; !done(); i++ {
		if i%64 != 0 {
			continue
		}
		if spun := time.Since(t0); spun <= spin {
			if spun > yieldAfter {
				runtime.Gosched()
			}
			continue
		}
		for {
			w.parked.Store(true)
			if done() && w.parked.CompareAndSwap(true, false) {
				return
			}
			<-w.wake // parked was cleared by a notify, which sends once
			if done() {
				return
			}
		}
	}
}

// DefaultSpin is how long a pool's worker spins for the next loop, and
// its caller for the workers, before blocking, unless NewPool is told
// otherwise; yieldAfter is how long a waiter spins before it starts
// yielding its processor.
const (
	DefaultSpin = 2 * time.Millisecond
	yieldAfter  = 100 * time.Microsecond
)

// NewPool starts a pool of threads threads (at least 1) whose idle
// threads spin for spin before blocking (0: DefaultSpin). A shorter spin
// leaves more CPU to other processes on an oversubscribed host and costs
// steps that run back to back their speed (see Pool).
func NewPool(threads int, spin time.Duration) *Pool {
	threads = max(1, threads)
	p := &Pool{threads: threads, spin: cmp.Or(spin, DefaultSpin), workers: make([]waiter, threads-1)}
	p.caller.wake = make(chan struct{}, 1)
	p.exited.Add(threads - 1)
	for i := range p.workers {
		p.workers[i].wake = make(chan struct{}, 1)
		go p.worker(i)
	}
	return p
}

// Threads reports the number of threads, the caller included.
func (p *Pool) Threads() int { return p.threads }

// Spin reports how long the pool's idle threads spin before blocking.
func (p *Pool) Spin() time.Duration { return p.spin }

// Close stops the worker goroutines and waits for them to exit. The pool
// must not be used afterwards; Close is idempotent.
func (p *Pool) Close() {
	if p.closed {
		return
	}
	p.closed = true
	p.quit.Store(true)
	p.loop.Add(1 << 16)
	for i := range p.workers {
		p.workers[i].notify()
	}
	p.exited.Wait()
}

// worker runs worker i: it takes part in every loop that asks for more
// than i workers. A loop's value is read once, so a worker handles each
// loop at most once (one that sat out a loop may skip it unseen).
func (p *Pool) worker(i int) {
	defer p.exited.Done()
	w := &p.workers[i]
	var seen uint64 // the pool's start: no loop can have begun before it
	for {
		w.await(func() bool { return p.loop.Load()>>16 != seen>>16 }, p.spin)
		seen = p.loop.Load()
		if p.quit.Load() {
			return
		}
		if i < int(seen&0xffff) {
			p.claim()
			if p.pending.Add(-1) == 0 {
				p.caller.notify()
			}
		}
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
	workers := min(len(p.workers), (n+grain-1)/grain-1)
	p.pending.Store(int64(workers))
	p.loop.Store((p.loop.Load()>>16+1)<<16 | uint64(workers))
	for i := range p.workers[:workers] {
		p.workers[i].notify()
	}
	p.claim()
	p.caller.await(p.loopDone, p.spin)
	p.r = nil
}

// loopDone reports whether every worker of the loop in progress is done.
func (p *Pool) loopDone() bool { return p.pending.Load() == 0 }

// For calls fn over [0, n) split evenly into one contiguous chunk per
// thread. It does not allocate if fn is a func value made once and reused
// (a method value stored in a field, say); a closure literal written at the
// call site may be allocated by the compiler, because the pool keeps fn
// while the workers run.
func (p *Pool) For(n int, fn func(lo, hi int)) {
	p.Do(n, 0, RangeFunc(fn))
}

// matMulJob is the loop body of Pool.MatMulT and Pool.MatMulTW, kept in
// the Pool so that the interface conversion in Do does not allocate. W is
// w32, w16 or wq by format; qa holds A quantized for Q8, abf A rounded to
// bfloat16 for BF16Dot.
type matMulJob struct {
	format  Format
	c, a    []float32
	lda     int // A's row stride (F32, F16, BF16)
	w32     []float32
	w16     []uint16
	wq, qa  []byte
	abf     []uint16
	m, n, k int
}

func (j *matMulJob) Range(lo, hi int) {
	switch j.format {
	case F32:
		matMulT(j.c[lo:], j.n, j.a, j.lda, j.w32[lo*j.k:], j.k, j.m, hi-lo, j.k)
	case F16, BF16:
		matMul16(j.c[lo:], j.n, j.a, j.lda, j.w16[lo*j.k:], j.format, j.k, j.m, hi-lo, j.k)
	case Q8:
		rb := j.k / Q8Block * Q8BlockBytes
		matMulQ8(j.c[lo:], j.n, j.qa, j.wq[lo*rb:], rb, j.m, hi-lo)
	case BF16Dot:
		matMulBF16(j.c[lo:], j.n, j.abf, j.k, j.w16[lo*j.k:], j.k, j.m, hi-lo, j.k)
	}
}

// l2Panel is the byte budget for the panel of W rows kept hot in L2 while
// every 4-row block of A sweeps over it.
const l2Panel = 256 << 10

// matMulQ8 computes c[i*ldc+j] for i < m, j < n from the quantized rows
// of A (qa, rowBytes each) and the rows of W (wq, in the Q8 group layout,
// starting at a group), a panel of W groups at a time so the panel stays
// in L2 while every row of A passes over it.
func matMulQ8(c []float32, ldc int, qa, wq []byte, rowBytes, m, n int) {
	panel := max(q8GroupRows, l2Panel/rowBytes/q8GroupRows*q8GroupRows)
	for j0 := 0; j0 < n; j0 += panel {
		nj := min(panel, n-j0)
		for i := 0; i < m; i++ {
			q8Groups(c[i*ldc+j0:i*ldc+j0+nj], qa[i*rowBytes:(i+1)*rowBytes], wq[j0*rowBytes:])
		}
	}
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
	p.run(matMulJob{format: F32, c: c, a: a, lda: k, w32: w, m: m, n: n, k: k})
}

// MatMulTW computes C = A·Wᵀ for a weight Matrix W (n = w.Rows(), k =
// w.Cols()): C is m×n, A is m×k. For F32, F16 and BF16 each C element
// equals Dot(A[i,:], row j of W widened to float32) bit for bit. For Q8
// every row of A is first quantized in blocks of 32 (as QuantizeQ8 does
// weights) and each element is the canonical Q8 dot product (exact
// integer sums per block and lane, then fma(sum, wd·ad, acc) per lane
// and the canonical tree). For BF16Dot every row of A is first rounded
// to bfloat16 and each element is the canonical bf16-products dot
// product (see Matrix.BF16Dot). It panics if a slice is shorter than its
// shape or m is negative.
func (p *Pool) MatMulTW(c, a []float32, w *Matrix, m int) {
	p.MatMulTWShared(a, m, [][]float32{c}, []*Matrix{w})
}

// MatMulTWShared computes cs[i] = A·ws[i]ᵀ for every i, each exactly as
// MatMulTW: the products of one input (the q, k and v projections, gate
// and up), so every matrix has A's k columns. A is prepared once for all
// of them: quantized for the Q8 matrices among ws, and copied to the row
// stride the float kernels read fastest (paddedStride) where that differs
// from k; rounded to bfloat16 for the BF16Dot ones.
func (p *Pool) MatMulTWShared(a []float32, m int, cs [][]float32, ws []*Matrix) {
	if len(ws) == 0 {
		return
	}
	k := ws[0].cols
	var floats, q8, bf bool
	for i, w := range ws {
		if m < 0 || w.cols != k || !fits(m, w.rows, len(cs[i])) || !fits(m, k, len(a)) {
			panic(fmt.Sprintf("kernels: MatMulTW m=%d n=%d k=%d (first matrix k=%d) with len(c)=%d len(a)=%d",
				m, w.rows, w.cols, k, len(cs[i]), len(a)))
		}
		floats = floats || w.format != Q8 && w.format != BF16Dot
		q8 = q8 || w.format == Q8
		bf = bf || w.format == BF16Dot
	}
	aFloat, lda := a, k
	if s := paddedStride(m, k); floats && s != k {
		if need := m * s; len(p.apad) < need {
			p.apad = make([]float32, need)
		}
		for r := range m {
			copy(p.apad[r*s:r*s+k], a[r*k:(r+1)*k])
		}
		aFloat, lda = p.apad, s
	}
	var qa []byte
	var abf []uint16
	if (q8 || bf) && m > 0 && k > 0 {
		if need := m * (k / Q8Block * Q8BlockBytes); q8 && len(p.qa) < need {
			p.qa = make([]byte, need)
		}
		if need := m * k; bf && len(p.abf) < need {
			p.abf = make([]uint16, need)
		}
		j := prepareJob{a: a, k: k}
		if q8 {
			qa, j.qa = p.qa, p.qa
		}
		if bf {
			abf, j.abf = p.abf, p.abf
		}
		p.prepare(j, m)
	}
	for i, w := range ws {
		p.run(matMulJob{format: w.format, c: cs[i], a: aFloat, lda: lda, w32: w.f32, w16: w.u16, wq: w.q8, qa: qa,
			abf: abf, m: m, n: w.rows, k: k})
	}
}

// prepareJob is the loop body of Pool.prepare, kept in the Pool so that
// the interface conversion in Do does not allocate: each row of A is
// quantized into qa and rounded to bfloat16 into abf (as roundBF16Go),
// where those are set.
type prepareJob struct {
	qa  []byte
	abf []uint16
	a   []float32
	k   int
}

func (j *prepareJob) Range(lo, hi int) {
	if j.qa != nil {
		rb := j.k / Q8Block * Q8BlockBytes
		for i := lo; i < hi; i++ {
			quantizeQ8Row(j.qa[i*rb:(i+1)*rb], j.a[i*j.k:(i+1)*j.k])
		}
	}
	if j.abf != nil {
		roundBF16(j.abf[lo*j.k:hi*j.k], j.a[lo*j.k:hi*j.k])
	}
}

// prepRowGrain is the fewest rows of A a thread prepares: fewer (a
// decode step's) cost less than waking the pool.
const prepRowGrain = 8

// prepare runs j over the m rows of A, spread by rows over the threads;
// every row is prepared alone, so the bytes do not depend on the thread
// count.
func (p *Pool) prepare(j prepareJob, m int) {
	p.prep = j
	p.Do(m, max(prepRowGrain, (m+p.threads-1)/p.threads), &p.prep)
	p.prep = prepareJob{}
}

// run spreads the columns of j over the threads: chunks of about an equal
// share per thread, rounded up to mmGrain.
func (p *Pool) run(j matMulJob) {
	if j.m == 0 || j.n == 0 {
		return
	}
	if j.k == 0 {
		clear(j.c[:j.m*j.n])
		return
	}
	chunk := (j.n + p.threads - 1) / p.threads
	chunk = (chunk + mmGrain - 1) / mmGrain * mmGrain
	p.mm = j
	p.Do(j.n, chunk, &p.mm)
	p.mm = matMulJob{}
}
