package gateway

import (
	"context"
	"fmt"
	"testing"

	"github.com/warden-ai/warden/config"
)

// TestPrefillPoolBusyIsNotAFailure: back-to-back requests that each need
// most of the prefill worker's pool must all be served: the prefill worker
// may still hold the previous request's pages for a moment after its
// client got the answer, and a fitting request must then wait (as it does
// for a full decode pool), not fail with 503.
func TestPrefillPoolBusyIsNotAFailure(t *testing.T) {
	pt := newPromptText(t)
	for _, backend := range backends {
		t.Run(string(backend), func(t *testing.T) {
			tg := startGateway(t, testConfig())
			reg := tg.RegistryAddr().String()
			dcfg := workerConfig(t, fmt.Sprint("decode-busy-", backend), config.RoleDecode, backend, reg)
			pcfg := workerConfig(t, fmt.Sprint("prefill-busy-", backend), config.RolePrefill, backend, reg)
			pcfg.Worker.KV.MemoryBytes = config.ByteSize(20 * tinyPageBytes) // 320 tokens
			startPDWorker(t, tg, dcfg)
			startPDWorker(t, tg, pcfg)
			text, _ := pt.text(t, 250, 1) // 16 of the prefill worker's 20 pages
			for i := range 10 {
				res := completion{tg: tg, key: tg.key, prompt: text, max: 8}.do(context.Background())
				if !res.complete(false) {
					t.Errorf("request %d: %v", i, res)
				}
			}
		})
	}
}
