package fairqueue

import (
	"container/heap"
	"container/list"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/warden-ai/warden/tenant"
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
			q := New(Config{MaxWaiting: backlog + 1, MaxWait: time.Hour})
			turn := backloggedTurns(b, q, tenants, backlog)
			var base fifo
			for range backlog {
				base.enter()
			}
			var wfq, fifo time.Duration
			b.ResetTimer()
			for i := range b.N {
				wfq += turn(i)

				t0 := time.Now()
				base.enter()
				t1 := time.Now()
				t2 := time.Now()
				<-base.signal()
				t3 := time.Now()
				t4 := time.Now()
				t5 := time.Now()
				fifo += t1.Sub(t0) + t3.Sub(t2) + t5.Sub(t4)
			}
			b.StopTimer()
			b.ReportMetric(float64(wfq.Nanoseconds())/float64(b.N), "wfq-ns/op")
			b.ReportMetric(float64(fifo.Nanoseconds())/float64(b.N), "fifo-ns/op")
			b.ReportMetric(float64(wfq)/float64(fifo), "x-fifo")
		})
	}
}

// fleetOf answers in-flight reports with every tenant but tenant-0 also
// having two requests in flight at another replica.
type fleetOf struct{}

func (fleetOf) ShareInFlight(_ context.Context, r tenant.InFlightReport) (map[string]int64, error) {
	fleet := make(map[string]int64, len(r.InFlight))
	for id, n := range r.InFlight {
		fleet[id] = n
		if id != "tenant-0" {
			fleet[id] += 2
		}
	}
	return fleet, nil
}

// BenchmarkFleetTurn measures BenchmarkTurn's trip with the fleet's
// in-flight counts (Config.Fleet, a tenant.FleetInFlight whose last report
// gave every tenant but one requests at another replica, so every service
// charges every other waiting tenant for its service there: the costly
// path) against the same queue
// without them, the local-only path, in the same run: x-local is the ratio.
//
//	go test -run XXX -bench FleetTurn -benchtime 100000x ./gateway/internal/fairqueue
func BenchmarkFleetTurn(b *testing.B) {
	const backlog = 1000
	for _, tenants := range []int{2, 10, 100} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			fleet := tenant.NewFleetInFlight(fleetOf{}, tenant.FleetConfig{Replica: "bench"})
			for i := range tenants {
				fleet.Begin(fmt.Sprintf("tenant-%d", i))
			}
			if err := fleet.Report(context.Background()); err != nil {
				b.Fatal(err)
			}
			shared := backloggedTurns(b, New(Config{MaxWaiting: backlog + 1, MaxWait: time.Hour, Fleet: fleet}), tenants, backlog)
			local := backloggedTurns(b, New(Config{MaxWaiting: backlog + 1, MaxWait: time.Hour}), tenants, backlog)
			var ts, tl time.Duration
			b.ResetTimer()
			for i := range b.N {
				ts += shared(i)
				tl += local(i)
			}
			b.StopTimer()
			b.ReportMetric(float64(ts.Nanoseconds())/float64(b.N), "fleet-ns/op")
			b.ReportMetric(float64(tl.Nanoseconds())/float64(b.N), "local-ns/op")
			b.ReportMetric(float64(ts)/float64(tl), "x-local")
		})
	}
}

// backloggedTurns fills q with backlog waiters of tenants tenants and
// returns one request's timed trip through it: a new request enters at the
// tail; capacity frees, the head gets its turn and leaves; the waiter its
// leaving hands the turn to finds no capacity and retries. Finding which
// waiter holds a turn is harness work and is not timed.
func backloggedTurns(b *testing.B, q *Queue, tenants, backlog int) func(i int) time.Duration {
	ctx := context.Background()
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
	}
	if h := holder(q); h != nil { // the first waiter's turn on entering
		<-h.Ready()
		h.Retry()
	}
	return func(i int) time.Duration {
		t0 := time.Now()
		enter(backlog + i)
		t1 := time.Now()
		head := signalPick(q) // Signal's pick: nobody holds a turn
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
		return t1.Sub(t0) + t3.Sub(t2) + t5.Sub(t4)
	}
}

// signalPick returns the waiter the next Signal gives a turn to.
func signalPick(q *Queue) *Waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.nextLocked()
	heap.Push(&f.level.ready, f)
	return f.head()
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
