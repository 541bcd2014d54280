package engine

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOrderIsTheTotalOrder: the radix order equals a comparison sort by
// value descending (-0 equal to +0), ties by id, NaN last — on rows with
// ties, signed zeros, infinities, NaNs and subnormals, of sizes around
// the passes' edges.
func TestOrderIsTheTotalOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	special := []float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN(), 5e-324, -5e-324, math.MaxFloat64, -math.MaxFloat64, 1, 1, -1}
	var s sampler
	for _, n := range []int{1, 2, 7, 1000, 70000} {
		for trial := range 3 {
			adj := make([]float64, n)
			for i := range adj {
				switch r.IntN(4) {
				case 0:
					adj[i] = special[r.IntN(len(special))]
				case 1:
					adj[i] = float64(float32(r.NormFloat64() * 4)) // float32 logits
				case 2:
					adj[i] = float64(r.IntN(5)) // many ties
				default:
					adj[i] = r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20))
				}
			}
			if trial == 2 {
				for i := range adj {
					adj[i] = 3 // all equal: every pass skipped
				}
			}
			want := make([]int32, n)
			for i := range want {
				want[i] = int32(i)
			}
			slices.SortFunc(want, func(a, b int32) int {
				la, lb := adj[a], adj[b]
				switch {
				case la != la && lb != lb:
				case la != la:
					return 1
				case lb != lb:
					return -1
				case la != lb:
					return cmp.Compare(lb, la)
				}
				return cmp.Compare(a, b)
			})
			got := make([]int32, n)
			if cap(s.idx) < n {
				s.idx = make([]int32, n)
			}
			s.order(s.idx[:n], adj)
			copy(got, s.idx[:n])
			if !slices.Equal(got, want) {
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("n=%d trial %d: position %d holds %d (%v), want %d (%v)", n, trial, i, got[i], adj[got[i]], want[i], adj[want[i]])
					}
				}
			}
		}
	}
}
