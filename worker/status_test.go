package worker

import (
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/config"
	"github.com/warden-ai/warden/kvtransfer"
)

// TestTransferStatusOneCausePerCode: on decode, a transfer cut short by the loss of
// its connection (the writer crashed) is Unavailable, the same answer the
// writer's loss gets, so the client sees a 503 to retry; a transfer that
// failed verification stays DataLoss (a 500, counted as integrity).
func TestTransferStatusOneCausePerCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("%w: connection: %w", kvtransfer.ErrIncomplete, io.EOF), codes.Unavailable},
		{fmt.Errorf("%w: connection: %w", kvtransfer.ErrIncomplete, io.ErrUnexpectedEOF), codes.Unavailable},
		{fmt.Errorf("%w: connection: %w", kvtransfer.ErrIncomplete, syscall.ECONNRESET), codes.Unavailable},
		{fmt.Errorf("%w: frames 3..4 missing", kvtransfer.ErrIncomplete), codes.DataLoss},
		{fmt.Errorf("%w: page 2", kvtransfer.ErrChecksum), codes.DataLoss},
		{kvtransfer.ErrTokenCount, codes.DataLoss},
		{kvtransfer.ErrAborted, codes.Aborted},
		{kvtransfer.ErrBusy, codes.FailedPrecondition},
	} {
		if got := status.Code(receiveStatus(c.err)); got != c.want {
			t.Errorf("%v: %s, want %s", c.err, got, c.want)
		}
	}
}

// TestReserveTimeoutFor: the gateway's asked-for reservation timeout is
// clamped to [reserve_timeout, reserve_timeout_max].
func TestReserveTimeoutFor(t *testing.T) {
	w := &Worker{reserveTimeout: 30 * time.Second}
	w.cfg = config.Default()
	w.cfg.Worker.Transfer.ReserveTimeoutMax = 10 * time.Minute
	for _, c := range []struct {
		askedMs int64
		want    time.Duration
	}{
		{0, 30 * time.Second},
		{5000, 30 * time.Second},
		{120000, 2 * time.Minute},
		{3600000, 10 * time.Minute},
	} {
		if got := w.reserveTimeoutFor(c.askedMs); got != c.want {
			t.Errorf("asked %d ms: %s, want %s", c.askedMs, got, c.want)
		}
	}
}
