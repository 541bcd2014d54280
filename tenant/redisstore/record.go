package redisstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/warden-ai/warden/internal/cachekey"
	"github.com/warden-ai/warden/tenant"
)

// tenantRecord is the stored form of a tenant. Besides the API fields it
// carries the budget period pre-parsed for the Lua scripts (pkind "day",
// "month" or "dur" with plen microseconds). Numeric fields have no
// omitempty: the scripts read them unconditionally.
type tenantRecord struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Weight    int       `json:"weight"`
	CreatedAt time.Time `json:"created_at"`
	// Incarnation is absent from records written before it existed;
	// the store assigns one on first read (incarnation.go).
	Incarnation string   `json:"inc,omitempty"`
	Disabled    bool     `json:"disabled"`
	RPM         int64    `json:"rpm"`
	TPM         int64    `json:"tpm"`
	Conc        int64    `json:"conc"`
	Budget      int64    `json:"budget"`
	Period      string   `json:"period"`
	PKind       string   `json:"pkind"`
	PLen        int64    `json:"plen"`
	Models      []string `json:"models,omitempty"`
	MaxPriority int      `json:"max_priority"`
	MaxAdapters int64    `json:"max_adapters,omitempty"`
	Cache       string   `json:"cache,omitempty"`
	CachedRate  *float64 `json:"cached_rate,omitempty"`
}

func toRecord(t tenant.Tenant) tenantRecord {
	r := tenantRecord{
		ID: t.ID, Name: t.Name, Weight: t.Weight, CreatedAt: t.CreatedAt, Incarnation: t.Incarnation, Disabled: t.Disabled,
		RPM: t.Limits.RequestsPerMinute, TPM: t.Limits.TokensPerMinute, Conc: t.Limits.MaxConcurrent,
		Budget: t.Limits.Budget, Period: string(t.Limits.BudgetPeriod), PKind: string(t.Limits.BudgetPeriod),
		Models: t.Limits.AllowedModels, MaxPriority: t.Limits.MaxPriority, MaxAdapters: t.Limits.MaxAdapters,
		Cache: string(t.PrefixCache), CachedRate: t.CachedTokenRate,
	}
	if d, ok := t.Limits.BudgetPeriod.Duration(); ok {
		r.PKind, r.PLen = "dur", d.Microseconds()
	}
	return r
}

func (r tenantRecord) tenant() tenant.Tenant {
	return tenant.Tenant{
		ID: r.ID, Name: r.Name, Weight: r.Weight, CreatedAt: r.CreatedAt, Incarnation: r.Incarnation, Disabled: r.Disabled,
		Limits: tenant.Limits{
			RequestsPerMinute: r.RPM, TokensPerMinute: r.TPM, MaxConcurrent: r.Conc,
			Budget: r.Budget, BudgetPeriod: tenant.BudgetPeriod(r.Period),
			AllowedModels: r.Models, MaxPriority: r.MaxPriority, MaxAdapters: r.MaxAdapters,
		},
		PrefixCache: cachekey.Mode(r.Cache), CachedTokenRate: r.CachedRate,
	}
}

// decodeRecord parses a stored tenant record.
func decodeRecord(raw string) (tenantRecord, error) {
	var r tenantRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return tenantRecord{}, fmt.Errorf("redisstore: corrupt tenant record: %w", err)
	}
	return r, nil
}
