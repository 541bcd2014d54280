package adapters

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/warden-ai/warden/internal/controlpb"
)

// parts makes a Recv over ps, then io.EOF.
func parts(ps ...*controlpb.AdapterPart) func() (*controlpb.AdapterPart, error) {
	return func() (*controlpb.AdapterPart, error) {
		if len(ps) == 0 {
			return nil, io.EOF
		}
		p := ps[0]
		ps = ps[1:]
		return p, nil
	}
}

func TestAssemble(t *testing.T) {
	a := adapter(t, 1)
	n := int64(len(a.weight))
	half := len(a.weight) / 2
	first := func() *controlpb.AdapterPart {
		return &controlpb.AdapterPart{Ref: a.ref, ConfigJson: a.cfg, WeightsSize: n, Weights: a.weight[:half], Pin: true}
	}
	u, err := Assemble(parts(first(), &controlpb.AdapterPart{Weights: a.weight[half:]}), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(u.Weights, a.weight) || !bytes.Equal(u.ConfigJSON, a.cfg) || !u.Pin || u.Ref.GetHash() != a.ref.Hash {
		t.Fatal("the assembled upload differs from what was sent")
	}
	// The assembled files load.
	m := New(1<<20, base(t), prepare)
	if _, err := m.Load(t.Context(), u.Ref, u.ConfigJSON, u.Weights, u.Pin); err != nil {
		t.Fatal(err)
	}
	withSize := func(p *controlpb.AdapterPart, size int64) *controlpb.AdapterPart {
		p.WeightsSize = size
		return p
	}
	for name, c := range map[string]struct {
		recv func() (*controlpb.AdapterPart, error)
		want error
	}{
		"empty":        {parts(), ErrStream},
		"no ref":       {parts(&controlpb.AdapterPart{ConfigJson: a.cfg, WeightsSize: n}), ErrStream},
		"bad hash":     {parts(&controlpb.AdapterPart{Ref: &controlpb.AdapterRef{Hash: "abc"}, ConfigJson: a.cfg, WeightsSize: n}), ErrStream},
		"no config":    {parts(&controlpb.AdapterPart{Ref: a.ref, WeightsSize: n}), ErrStream},
		"no size":      {parts(withSize(first(), 0)), ErrStream},
		"over memory":  {parts(withSize(first(), 4<<20)), ErrTooLarge},
		"short":        {parts(first()), ErrStream},
		"long":         {parts(first(), &controlpb.AdapterPart{Weights: a.weight[half-1:]}), ErrStream},
		"second ref":   {parts(first(), &controlpb.AdapterPart{Ref: a.ref, Weights: a.weight[half:]}), ErrStream},
		"second size":  {parts(first(), &controlpb.AdapterPart{WeightsSize: n, Weights: a.weight[half:]}), ErrStream},
		"recv failure": {func() (*controlpb.AdapterPart, error) { return nil, io.ErrUnexpectedEOF }, io.ErrUnexpectedEOF},
	} {
		if _, err := Assemble(c.recv, 1<<20); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// FuzzAssemble: any two-part stream either assembles to exactly the
// declared weights or is refused with ErrStream or ErrTooLarge; it never
// buffers past the bound.
func FuzzAssemble(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", []byte(`{}`), int64(6), []byte("abc"), []byte("def"), false)
	f.Add("", []byte{}, int64(-1), []byte{}, []byte("x"), true)
	f.Fuzz(func(t *testing.T, hash string, cfg []byte, size int64, w1, w2 []byte, ref2 bool) {
		p2 := &controlpb.AdapterPart{Weights: w2}
		if ref2 {
			p2.Ref = &controlpb.AdapterRef{Hash: hash}
		}
		const capacity = 1 << 10
		u, err := Assemble(parts(&controlpb.AdapterPart{Ref: &controlpb.AdapterRef{Hash: hash}, ConfigJson: cfg, WeightsSize: size, Weights: w1}, p2), capacity)
		if err != nil {
			if !errors.Is(err, ErrStream) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v is neither ErrStream nor ErrTooLarge", err)
			}
			return
		}
		if int64(len(u.Weights)) != size || size > maxWeights(capacity) || !bytes.Equal(u.Weights, append(append([]byte{}, w1...), w2...)) {
			t.Fatalf("assembled %d bytes for a declared %d", len(u.Weights), size)
		}
	})
}
