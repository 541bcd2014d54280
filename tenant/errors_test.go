package tenant

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestLimitErrorIs(t *testing.T) {
	all := []error{ErrRateLimited, ErrInsufficientQuota, ErrModelNotAllowed, ErrForbidden, ErrRequestTooLarge}
	for _, c := range []struct {
		e    LimitError
		want error
		msg  string
	}{
		{LimitError{Kind: KindRequests, Limit: 5, RetryAfter: 12 * time.Second}, ErrRateLimited, "rate limit of 5 requests per minute reached (0 left); retry after 12s"},
		{LimitError{Kind: KindTokens, Limit: 1000, Remaining: 400, RetryAfter: 6 * time.Second}, ErrRateLimited, "1000 tokens per minute reached (400 left)"},
		{LimitError{Kind: KindConcurrency, Limit: 2, RetryAfter: time.Second}, ErrRateLimited, "concurrent request limit of 2"},
		{LimitError{Kind: KindBudget, Limit: 1000, Remaining: 200, RetryAfter: 2 * time.Hour}, ErrInsufficientQuota, "budget of 1000 for this period exhausted (200 left); retry after 2h0m0s"},
		{LimitError{Kind: KindModel}, ErrModelNotAllowed, "model not allowed"},
		{LimitError{Kind: KindPriority, Limit: 3}, ErrForbidden, "priority above the tenant maximum of 3"},
		{LimitError{Kind: KindTokens, Limit: 1000, Unsatisfiable: true}, ErrRequestTooLarge, "1000 tokens per minute is smaller than the request"},
		{LimitError{Kind: KindBudget, Limit: 500, Unsatisfiable: true}, ErrRequestTooLarge, "budget of 500 for this period is smaller than the request"},
	} {
		err := fmt.Errorf("acquire: %w", &c.e)
		for _, s := range all {
			if got := errors.Is(err, s); got != (s == c.want) {
				t.Errorf("%+v: errors.Is(%v) = %v", c.e, s, got)
			}
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: message %q lacks %q", c.e, err, c.msg)
		}
	}
}
