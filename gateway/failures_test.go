package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/warden-ai/warden/gateway/internal/adapters"
	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/gateway/internal/lifecycle"
	"github.com/warden-ai/warden/internal/constrain"
	"github.com/warden-ai/warden/internal/controlpb"
)

// TestOneErrorPerCause is the table of docs/api.md "Failures": every
// worker or transfer failure, and every abort cause, maps to one status,
// one code and, for every 503, a retry-after; no client error names the
// worker, its address or its pool, whatever the worker's message said.
func TestOneErrorPerCause(t *testing.T) {
	const internals = "decode-7 at 10.0.0.7:7001, pool 256 pages"
	type want struct {
		status int
		code   string
		retry  bool
	}
	unavailable := want{503, "worker_unavailable", true}
	internal := want{500, api.CodeInternal, false}
	for _, c := range []struct {
		name string
		err  error
		want want
	}{
		{"connection refused", status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 10.0.0.7:7001: connect: connection refused\""), unavailable},
		{"connection reset", status.Error(codes.Unavailable, "error reading from server: read tcp 10.0.0.7:7001: connection reset by peer"), unavailable},
		{"transfer cut short by the writer's crash", status.Error(codes.Unavailable, "kv transfer: transfer incomplete: connection: EOF "+internals), unavailable},
		{"worker shutting down", status.Error(codes.Unavailable, "worker is shutting down "+internals), unavailable},
		{"reservation abandoned", status.Error(codes.Aborted, "reservation abandoned "+internals), unavailable},
		{"pool full after admission", status.Error(codes.ResourceExhausted, "KV pool full "+internals), unavailable},
		{"never fits after admission", status.Error(codes.OutOfRange, "can never fit "+internals), unavailable},
		{"transfer failed verification", status.Error(codes.DataLoss, "kv transfer: checksum mismatch "+internals), internal},
		{"owner violation", status.Error(codes.Internal, "kv owner violation: "+internals), internal},
		{"other worker error", status.Error(codes.Internal, "engine: "+internals), internal},
		{"other invalid argument", status.Error(codes.InvalidArgument, "ticket is for another owner "+internals), internal},
		{"no room for the adapter", fmt.Errorf("%w: load m:a: %v", adapters.ErrNoRoom, status.Error(codes.ResourceExhausted, "adapter memory full "+internals)), unavailable},
		{"constraint refused", controlpb.ConstraintRefused(&constrain.LimitError{Limit: "choices", Size: 9, Max: 5, Unit: "strings"}), want{400, api.CodeInvalidValue, false}},
	} {
		_, e := workerFailure(c.err, "guided_choice")
		check(t, c.name, e, c.want.status, c.want.code, c.want.retry)
	}
	for _, c := range []struct {
		cause string
		want  want
	}{
		{lifecycle.CauseWorkerLost, unavailable},
		{lifecycle.CauseShutdown, want{503, "shutting_down", true}},
		{lifecycle.CauseAdmin, want{503, "request_aborted", true}},
		{lifecycle.CauseDeadline, want{504, "timeout", false}},
		{lifecycle.CauseQuota, want{429, "insufficient_quota", false}},
		{lifecycle.CauseClientDisconnect, want{499, "request_aborted", false}},
	} {
		check(t, "abort "+c.cause, abortedError(c.cause, time.Minute), c.want.status, c.want.code, c.want.retry)
	}
	check(t, "model unavailable", api.ModelUnavailable("tiny", "no healthy worker serves it"), 503, api.CodeModelUnavailable, true)
}

func check(t *testing.T, name string, e *api.Error, status int, code string, retry bool) {
	t.Helper()
	if e.Status != status || e.Code != code || (e.Headers.Get("Retry-After") != "") != retry {
		t.Errorf("%s: %d %s retry-after %q; want %d %s retry-after %v", name, e.Status, e.Code, e.Headers.Get("Retry-After"), status, code, retry)
	}
	if status == http.StatusServiceUnavailable && !retry {
		t.Errorf("%s: a 503 without retry-after", name)
	}
	for _, leak := range []string{"decode-7", "10.0.0.7", "7001", "256", "pool"} {
		if strings.Contains(e.Message, leak) {
			t.Errorf("%s: the client's message %q names %q", name, e.Message, leak)
		}
	}
}
