//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/cu"

	"github.com/warden-ai/warden/worker/model"
)

// openTinyFamily writes and loads the tiny preset shaped as family (see
// model.FamilyPresetConfig) in dtype.
func openTinyFamily(t *testing.T, family string, dtype model.DType) *model.Model {
	t.Helper()
	dir := t.TempDir()
	if err := model.InitFamily(dir, model.PresetTiny, family, 1, dtype); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestQKVPrep checks the Qwen families' attention extras against a
// float64 computation: q/k/v biases alone (Qwen2), per-head q/k norms
// alone (Qwen3) and both, on rows of 3 query, 1 key and 1 value heads.
func TestQKVPrep(t *testing.T) {
	td := newTestDev(t)
	r := rand.New(rand.NewPCG(15, 16))
	const rows, heads, kvHeads, hd, eps = 5, 3, 1, 160, 1e-6
	const width = (heads + 2*kvHeads) * hd
	geom := geometry{Heads: heads, KVHeads: kvHeads, HeadDim: hd, QKVDim: width, Eps: eps}
	dgeom := td.upload(bytesOf(&geom))
	x, bias, qn, kn := randFloats(r, rows*width), randFloats(r, width), randFloats(r, hd), randFloats(r, hd)
	dbias, dqn, dkn := td.upload(sliceBytes(bias)), td.upload(sliceBytes(qn)), td.upload(sliceBytes(kn))
	worst := 0.0
	for _, tc := range []struct {
		name       string
		bias, norm bool
	}{{"bias", true, false}, {"norm", false, true}, {"both", true, true}} {
		dx := td.upload(sliceBytes(x))
		var b, q, k cu.DevicePtr
		if tc.bias {
			b = dbias
		}
		if tc.norm {
			q, k = dqn, dkn
		}
		td.do(func() error { return td.k.qkvPrepRows(td.s, dx, b, q, k, dgeom, rows, heads+2*kvHeads) })
		got := td.readFloats(dx, rows*width)
		for row := range rows {
			for h := range heads + 2*kvHeads {
				want := make([]float64, hd)
				for i := range want {
					want[i] = float64(x[row*width+h*hd+i])
					if tc.bias {
						want[i] += float64(bias[h*hd+i])
					}
				}
				w := kn
				if h < heads {
					w = qn
				}
				if tc.norm && h < heads+kvHeads { // query or key head
					var ss float64
					for _, v := range want {
						ss += v * v
					}
					inv := 1 / math.Sqrt(ss/hd+eps)
					for i := range want {
						want[i] *= inv * float64(w[i])
					}
				}
				for i, wv := range want {
					g := float64(got[row*width+h*hd+i])
					rel := math.Abs(g-wv) / (math.Abs(wv) + 1e-3)
					if !(rel <= 1e-5) {
						t.Fatalf("%s: row %d head slice %d [%d] = %g, want %g", tc.name, row, h, i, g, wv)
					}
					worst = max(worst, rel)
				}
			}
		}
	}
	t.Logf("KERNEL qkv_prep max_rel_err=%.3g", worst)
}
