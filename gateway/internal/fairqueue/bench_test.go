package fairqueue

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fifo is the baseline: the least a wait queue must do per request (a
// mutex, a list and a wake-up channel), without fairness.
type fifo struct {
	mu sync.Mutex
	l  list.List
}

func (f *fifo) enter() chan struct{} {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	f.l.PushBack(ch)
	f.mu.Unlock()
	return ch
}

// signal wakes the head and returns its channel.
func (f *fifo) signal() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := f.l.Remove(f.l.Front()).(chan struct{})
	ch <- struct{}{}
	return ch
}

// BenchmarkTurn measures one request's trip through a backlogged queue
// against the FIFO baseline in the same run (x-fifo is the ratio): a new
// request enters at the tail; capacity frees, the head gets its turn and
// leaves; the waiter its leaving hands the turn to finds no capacity and
// retries. Finding which waiter holds a turn is harness work and is not
// timed (each side pays the same number of clock reads). Run with
//
//	go test -run XXX -bench Turn -benchtime 100000x ./gateway/internal/fairqueue
func BenchmarkTurn(b *testing.B) {
	const backlog = 1000
	for _, tenants := range []int{1, 10, 1000} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			ctx := context.Background()
			q := New(Config{MaxWaiting: backlog + 1, MaxWait: time.Hour})
			var base fifo
			names := make([]string, tenants)
			for i := range names {
				names[i] = fmt.Sprintf("tenant-%d", i)
			}
			enter := func(i int) {
				if _, err := q.Enter(ctx, names[i%tenants], 0, 1+i%3, int64(1+i%7)); err != nil {
					b.Fatal(err)
				}
			}
			for i := range backlog {
				enter(i)
				base.enter()
			}
			if h := holder(q); h != nil { // the first waiter's turn on entering
				<-h.Ready()
				h.Retry()
			}
			var wfq, fifo time.Duration
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				enter(backlog + i)
				t1 := time.Now()
				head := q.levels[0].ready[0].head() // Signal's pick: nobody holds a turn
				t2 := time.Now()
				q.Signal()
				<-head.Ready()
				head.Done()
				t3 := time.Now()
				next := holder(q)
				t4 := time.Now()
				<-next.Ready()
				next.Retry()
				t5 := time.Now()
				wfq += t1.Sub(t0) + t3.Sub(t2) + t5.Sub(t4)

				t0 = time.Now()
				base.enter()
				t1 = time.Now()
				t2 = time.Now()
				<-base.signal()
				t3 = time.Now()
				t4 = time.Now()
				t5 = time.Now()
				fifo += t1.Sub(t0) + t3.Sub(t2) + t5.Sub(t4)
			}
			b.StopTimer()
			b.ReportMetric(float64(wfq.Nanoseconds())/float64(b.N), "wfq-ns/op")
			b.ReportMetric(float64(fifo.Nanoseconds())/float64(b.N), "fifo-ns/op")
			b.ReportMetric(float64(wfq)/float64(fifo), "x-fifo")
		})
	}
}

// holder returns the waiter holding a turn, if any.
func holder(q *Queue) *Waiter {
	for _, l := range q.levels {
		for _, f := range l.flows {
			if h := f.head(); h.state == stateTrying {
				return h
			}
		}
	}
	return nil
}
