package kernels

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
)

func TestPoolMatMulTMatchesSerial(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	shapes := [][3]int{{1, 1, 1}, {1, 97, 33}, {3, 5, 7}, {7, 131, 65}, {17, 301, 129}, {2, 1000, 24}, {5, 49, 1}}
	for _, threads := range []int{1, 2, 3, 7} {
		p := NewPool(threads, 0)
		for _, s := range shapes {
			m, n, k := s[0], s[1], s[2]
			a, w := randVec(r, m*k, true), randVec(r, n*k, true)
			want := make([]float32, m*n)
			MatMulT(want, a, w, m, n, k)
			got := make([]float32, m*n)
			p.MatMulT(got, a, w, m, n, k)
			sameSlices(t, fmt.Sprintf("threads=%d m=%d n=%d k=%d", threads, m, n, k), got, want)
			withPureGo(func() {
				clear(got)
				p.MatMulT(got, a, w, m, n, k)
			})
			sameSlices(t, fmt.Sprintf("pure Go threads=%d m=%d n=%d k=%d", threads, m, n, k), got, want)
		}
		p.Close()
		p.Close() // idempotent
	}
}

// countRanger records which indices it was given.
type countRanger struct{ hits []atomic.Int32 }

func (c *countRanger) Range(lo, hi int) {
	for i := lo; i < hi; i++ {
		c.hits[i].Add(1)
	}
}

func TestPoolDoCoversEachIndexOnce(t *testing.T) {
	p := NewPool(3, 0)
	defer p.Close()
	for _, n := range []int{0, 1, 2, 3, 10, 1001} {
		for _, grain := range []int{0, 1, 7, 5000} {
			c := &countRanger{hits: make([]atomic.Int32, n)}
			p.Do(n, grain, c)
			for i := range c.hits {
				if h := c.hits[i].Load(); h != 1 {
					t.Fatalf("n=%d grain=%d: index %d ran %d times", n, grain, i, h)
				}
			}
		}
	}
	var sum atomic.Int64
	p.For(100, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			sum.Add(int64(i))
		}
	})
	if sum.Load() != 4950 {
		t.Fatalf("For summed %d, want 4950", sum.Load())
	}
}

// TestPoolLoopsBackToBack runs thousands of short loops in a row on 2, 3
// and 4 threads, so workers finish, spin, block and are woken in every
// interleaving: each index runs once per loop, and under -race the loops'
// state is never touched by a worker still on an earlier loop.
func TestPoolLoopsBackToBack(t *testing.T) {
	for _, threads := range []int{2, 3, 4} {
		p := NewPool(threads, 0)
		c := &countRanger{hits: make([]atomic.Int32, 64)}
		for it := range 3000 {
			n := 1 + it%64
			for i := range c.hits[:n] {
				c.hits[i].Store(0)
			}
			p.Do(n, 1+it%5, c)
			for i := range c.hits[:n] {
				if h := c.hits[i].Load(); h != 1 {
					t.Fatalf("threads=%d loop %d: index %d ran %d times", threads, it, i, h)
				}
			}
		}
		p.Close()
	}
}

// TestWaiterIgnoresLateNotify: a notify that arrives while done() is
// still false (one delayed from an earlier loop) wakes the waiter but
// does not end its wait. The race detector once caught a caller that
// returned on such a notify while a worker still ran the loop.
func TestWaiterIgnoresLateNotify(t *testing.T) {
	w := waiter{wake: make(chan struct{}, 1)}
	var done, returned atomic.Bool
	go func() {
		// awaitParked waits for the waiter to block, false if it returned.
		awaitParked := func() bool {
			for !w.parked.Load() {
				if returned.Load() {
					return false
				}
				runtime.Gosched()
			}
			return true
		}
		if !awaitParked() {
			return
		}
		w.notify() // late: done() is false
		if !awaitParked() {
			return
		}
		done.Store(true)
		w.notify()
	}()
	w.await(done.Load, DefaultSpin)
	returned.Store(true)
	if !done.Load() {
		t.Fatal("await returned on a notify while done() was false")
	}
}

func TestPoolNoAllocations(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	m, n, k := 2, 200, 64
	a, w := randVec(r, m*k, false), randVec(r, n*k, false)
	c := make([]float32, m*n)
	p := NewPool(2, 0)
	defer p.Close()
	if allocs := testing.AllocsPerRun(50, func() { p.MatMulT(c, a, w, m, n, k) }); allocs != 0 {
		t.Errorf("Pool.MatMulT allocates %v times per call", allocs)
	}
	cr := &countRanger{hits: make([]atomic.Int32, 64)}
	if allocs := testing.AllocsPerRun(50, func() { p.Do(64, 8, cr) }); allocs != 0 {
		t.Errorf("Pool.Do allocates %v times per call", allocs)
	}
	fn := cr.Range // a func value made once, as the engine stores it
	if allocs := testing.AllocsPerRun(50, func() { p.For(64, fn) }); allocs != 0 {
		t.Errorf("Pool.For allocates %v times per call", allocs)
	}
}
