package worker

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/controlpb"
	"github.com/warden-ai/warden/worker/engine"
	"github.com/warden-ai/warden/worker/model"
)

// Bounds on the compiled structured-output grammars a worker keeps: their
// number, and their memory together with their token masks (each
// grammar's masks are bounded too, see internal/constrain).
const (
	grammarCacheSize  = 32
	grammarCacheBytes = 256 << 20
)

var _ engine.Constraint = (*constrain.Matcher)(nil)

// constraints compiles structured-output constraints against the model's
// vocabulary, which it loads from the model directory on first use.
type constraints struct {
	once  sync.Once
	vocab *constrain.Vocab
	err   error
	cache *constrain.Cache
}

// constraintFor returns the per-sequence constraint starter of p's
// constraint, or nil when p has none.
func (w *Worker) constraintFor(p *controlpb.SamplingParams) (func() engine.Constraint, error) {
	return w.constraints.starter(w.rt.Model, p.GetConstraint())
}

// starter compiles wire (a constrain.Spec's wire form; "" is none) for
// model m, whose tokenizer it loads on first use.
func (c *constraints) starter(m *model.Model, wire string) (func() engine.Constraint, error) {
	if wire == "" {
		return nil, nil
	}
	c.once.Do(func() {
		tok, err := m.LoadTokenizer()
		if err != nil {
			c.err = err
			return
		}
		c.vocab = constrain.TokenizerVocab(tok, m.Config.VocabSize, m.EOSTokenIDs())
		c.cache = constrain.NewCache(constrain.CacheLimits{Entries: grammarCacheSize, Bytes: grammarCacheBytes})
	})
	if c.err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "structured outputs: loading the vocabulary: %v", c.err)
	}
	g, err := constrain.DefaultLimits.Accept(c.cache, wire)
	if err != nil {
		return nil, controlpb.ConstraintRefused(err)
	}
	v := c.vocab
	return func() engine.Constraint { return g.NewMatcher(v) }, nil
}
