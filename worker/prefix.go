package worker

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/worker/engine"
)

// cacheDomainFrom reads the domain the gateway attached to ctx; false
// when it attached none.
func cacheDomainFrom(ctx context.Context) (cachekey.Domain, bool, error) {
	vs := metadata.ValueFromIncomingContext(ctx, cachekey.MetadataDomain)
	if len(vs) == 0 {
		return cachekey.Domain{}, false, nil
	}
	var d cachekey.Domain
	if b, err := hex.DecodeString(vs[0]); err != nil || len(b) != len(d) || len(vs) > 1 {
		return cachekey.Domain{}, false, invalid("%s must be one value of %d hex digits", cachekey.MetadataDomain, 2*len(d))
	}
	hex.Decode(d[:], []byte(vs[0]))
	return d, true, nil
}

// prefixCacheEnabled says whether this worker serves from a prefix cache:
// configured on. Both backends know sealed pages (the cuda backend's device
// tag check compares a shared page with the prefix tag the engine computed
// for it).
func (w *Worker) prefixCacheEnabled() bool {
	return w.cfg.Worker.KV.PrefixCache
}

// cacheVersion is the model/format version of this worker's KV: the
// tokenizer, the model's configuration and the page layout. Sealed pages
// are shared only between requests that agree on it.
func (w *Worker) cacheVersion() uint64 {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%+v|%d|%d|%s", w.assets.GetTokenizerSha256(), w.rt.Model.Config,
		w.capacity.PageTokens, w.capacity.PageBytes, w.cfg.Worker.Backend)
	return binary.LittleEndian.Uint64(h.Sum(nil))
}

// prefixFor returns the engine's prefix settings for a Generate on ctx,
// or nil when the request uses no cache.
func (w *Worker) prefixFor(ctx context.Context) (*engine.Prefix, error) {
	d, ok, err := cacheDomainFrom(ctx)
	if err != nil || !ok || !w.prefixCacheEnabled() {
		return nil, err
	}
	return &engine.Prefix{Domain: d, Version: w.version}, nil
}
