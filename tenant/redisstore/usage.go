package redisstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant"
)

// Usage implements tenant.Store.
func (s *Store) Usage(ctx context.Context, tenantID string, from, to time.Time) ([]tenant.Usage, error) {
	days, err := tenant.UsageDays(tenantID, from, to)
	if err != nil {
		return nil, err
	}
	cmds := make([]*redis.MapStringStringCmd, len(days))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, day := range days {
			cmds[i] = p.HGetAll(ctx, s.key("u", tenantID, day))
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, "usage", err)
	}
	s.ok()
	var out []tenant.Usage
	for i, c := range cmds {
		byModel := map[string]*tenant.Usage{}
		billed := map[string]bool{}
		for field, val := range c.Val() {
			kind, model, ok := strings.Cut(field, ":")
			n, err := strconv.ParseInt(val, 10, 64)
			if !ok || err != nil {
				return nil, fmt.Errorf("redisstore: corrupt usage field %q=%q", field, val)
			}
			u := byModel[model]
			if u == nil {
				u = &tenant.Usage{TenantID: tenantID, Model: model, Day: days[i]}
				byModel[model] = u
			}
			switch kind {
			case "r":
				u.Requests = n
			case "p":
				u.PromptTokens = n
			case "c":
				u.CompletionTokens = n
			case "k":
				u.CachedTokens = n
			case "b":
				u.BilledTokens = n
				billed[model] = true
			}
		}
		for m, u := range byModel {
			if !billed[m] {
				// Recorded before billed tokens were: every token was
				// billed.
				u.BilledTokens = u.PromptTokens + u.CompletionTokens
			}
		}
		for _, m := range slices.Sorted(maps.Keys(byModel)) {
			out = append(out, *byModel[m])
		}
	}
	return out, nil
}
