package registry

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestNotSent: only errors raised before the connection carried a call
// count as not sent; a connection lost under a call, or any status the
// worker sent, does not.
func TestNotSent(t *testing.T) {
	for _, tc := range []struct {
		err           error
		notSent, lost bool
	}{
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), true, true},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: authentication handshake failed: read tcp 127.0.0.1:59284->127.0.0.1:38517: read: connection reset by peer"`), true, true},
		{status.Error(codes.Unavailable, "error reading from server: EOF"), false, true},
		{status.Error(codes.Unavailable, "transport is closing"), false, true},
		{status.Error(codes.Unavailable, "worker draining"), false, false},
		{status.Error(codes.Internal, "authentication handshake failed"), false, false},
		{errors.New("Error while dialing"), false, false},
	} {
		if got := NotSent(tc.err); got != tc.notSent {
			t.Errorf("NotSent(%v) = %v, want %v", tc.err, got, tc.notSent)
		}
		if got := ConnectionLost(tc.err); got != tc.lost {
			t.Errorf("ConnectionLost(%v) = %v, want %v", tc.err, got, tc.lost)
		}
	}
}
