//go:build warden_faults

package cli

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/warden-ai/warden/internal/faults"
	"github.com/warden-ai/warden/worker"
)

// testFaults builds the KV data-plane faults WARDEN_TEST_FAULTS asks for,
// so that end-to-end tests can stall a real worker at a chosen point (for
// example to kill it in the middle of a shm transfer). Only binaries built
// with -tags warden_faults have this; the variable holds one fault:
//
//	stall-shm-after=N   the first shm writer that wrote N bytes of a
//	                    transfer stalls for good; the worker logs
//	                    "test fault: shm writer stalled" once it does
func testFaults(log *slog.Logger) ([]worker.Option, error) {
	spec := os.Getenv("WARDEN_TEST_FAULTS")
	if spec == "" {
		return nil, nil
	}
	fmt.Fprintln(os.Stderr, "warden: THIS BINARY IS BUILT WITH -tags warden_faults: WARDEN_TEST_FAULTS injects KV transfer faults; never serve anyone with it")
	name, val, _ := strings.Cut(spec, "=")
	switch name {
	case "stall-shm-after":
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("WARDEN_TEST_FAULTS: stall-shm-after=%q: want a byte count", val)
		}
		inj := faults.New(faults.StallShmAfter(n))
		go func() {
			<-inj.Stalled()
			log.Warn("test fault: shm writer stalled", "after_bytes", n)
		}()
		return []worker.Option{worker.WithTransferFaults(inj)}, nil
	}
	return nil, fmt.Errorf("WARDEN_TEST_FAULTS: unknown fault %q (want stall-shm-after=N)", name)
}
