// Package redisstore is the Redis tenant.Store, shared by every gateway
// replica. Each admission decision (Acquire), release and lease renewal is
// one Lua script, so limits are exact however many replicas share the
// Redis: the script sees and updates the tenant's whole state at once.
//
// # Keys
//
// All keys start with the configured prefix (default "warden:"); tests use
// a unique prefix each. For Redis Cluster the prefix must contain a hash tag,
// e.g. "warden:{prod}:", because scripts touch several keys at once.
//
//	t:<tenant>        tenant record (JSON)          tenants  set of tenant IDs
//	k:<key id>        key record (hash)             keys     set of key IDs
//	tk:<tenant>       set of the tenant's key IDs
//	m:<model>         model limits (JSON)           models   set of model names
//	rl:<tenant>       request and token buckets (hash; expires when full)
//	bg:<tenant>       budget period and tokens used (hash; expires after the period)
//	cc:<tenant>       leases: sorted set of lease ID by expiry
//	u:<tenant>:<day>  usage of one UTC day (hash r:|p:|c:<model>; kept for the retention)
//
// # Clock
//
// By default the scripts read the Redis server's TIME, so replicas whose
// clocks disagree still share one limit window. WithClock injects a clock
// instead (tests).
//
// # Outages
//
// Errors reaching Redis wrap tenant.ErrUnavailable; the go-redis client
// reconnects by itself when Redis is back, and scripts are reloaded
// (EVALSHA falls back to EVAL). Acquire fails closed unless WithFailOpen is
// set, in which case it admits the request with a Degraded lease that holds
// nothing; its Release (if Redis is back by then) charges the actual tokens
// and records usage. Authentication during an outage is tenant.AuthCache's
// job.
package redisstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant"
)

// Defaults.
const (
	DefaultPrefix         = "warden:"
	DefaultLeaseTTL       = 10 * time.Minute
	DefaultUsageRetention = 400 * 24 * time.Hour
)

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the key prefix (default DefaultPrefix).
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// WithClock makes the store use now instead of the Redis server's clock.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.clock = now } }

// WithLeaseTTL sets how long a lease holds its concurrency slot unless
// renewed (default DefaultLeaseTTL).
func WithLeaseTTL(d time.Duration) Option { return func(s *Store) { s.leaseTTL = d } }

// WithUsageRetention sets how long daily usage is kept (default
// DefaultUsageRetention).
func WithUsageRetention(d time.Duration) Option { return func(s *Store) { s.usageTTL = d } }

// WithFailOpen makes Acquire admit requests without checks while Redis is
// unavailable, instead of failing with tenant.ErrUnavailable.
func WithFailOpen(open bool) Option { return func(s *Store) { s.failOpen = open } }

// WithLogger sets the logger for outage transitions (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Store) { s.log = l } }

// Store is the Redis tenant.Store. It does not own the client.
type Store struct {
	rdb      redis.UniversalClient
	hasher   *tenant.KeyHasher
	sc       scripts
	prefix   string
	clock    func() time.Time
	leaseTTL time.Duration
	usageTTL time.Duration
	failOpen bool
	log      *slog.Logger
	down     atomic.Bool
}

var (
	_ tenant.Store        = (*Store)(nil)
	_ tenant.LeaseBackend = (*Store)(nil)
)

// New returns a store on rdb whose API keys are hashed with secret (at least
// tenant.MinServerSecretLen bytes). It does not contact Redis.
func New(rdb redis.UniversalClient, secret []byte, opts ...Option) (*Store, error) {
	h, err := tenant.NewKeyHasher(secret)
	if err != nil {
		return nil, err
	}
	s := &Store{
		rdb: rdb, hasher: h, sc: newScripts(), prefix: DefaultPrefix,
		leaseTTL: DefaultLeaseTTL, usageTTL: DefaultUsageRetention, log: slog.Default(),
	}
	for _, o := range opts {
		o(s)
	}
	switch {
	case rdb == nil:
		return nil, fmt.Errorf("%w: nil Redis client", tenant.ErrInvalid)
	case s.leaseTTL < time.Millisecond:
		return nil, fmt.Errorf("%w: lease TTL must be at least 1ms, got %v", tenant.ErrInvalid, s.leaseTTL)
	case s.usageTTL < 24*time.Hour:
		return nil, fmt.Errorf("%w: usage retention must be at least 24h, got %v", tenant.ErrInvalid, s.usageTTL)
	}
	return s, nil
}

// tenantRecord is the stored form of a tenant. Besides the API fields it
// carries the budget period pre-parsed for the Lua scripts (pkind "day",
// "month" or "dur" with plen microseconds). Numeric fields have no
// omitempty: the scripts read them unconditionally.
type tenantRecord struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Weight      int       `json:"weight"`
	CreatedAt   time.Time `json:"created_at"`
	Disabled    bool      `json:"disabled"`
	RPM         int64     `json:"rpm"`
	TPM         int64     `json:"tpm"`
	Conc        int64     `json:"conc"`
	Budget      int64     `json:"budget"`
	Period      string    `json:"period"`
	PKind       string    `json:"pkind"`
	PLen        int64     `json:"plen"`
	Models      []string  `json:"models,omitempty"`
	MaxPriority int       `json:"max_priority"`
}

func toRecord(t tenant.Tenant) tenantRecord {
	r := tenantRecord{
		ID: t.ID, Name: t.Name, Weight: t.Weight, CreatedAt: t.CreatedAt, Disabled: t.Disabled,
		RPM: t.Limits.RequestsPerMinute, TPM: t.Limits.TokensPerMinute, Conc: t.Limits.MaxConcurrent,
		Budget: t.Limits.Budget, Period: string(t.Limits.BudgetPeriod), PKind: string(t.Limits.BudgetPeriod),
		Models: t.Limits.AllowedModels, MaxPriority: t.Limits.MaxPriority,
	}
	if d, ok := t.Limits.BudgetPeriod.Duration(); ok {
		r.PKind, r.PLen = "dur", d.Microseconds()
	}
	return r
}

func (r tenantRecord) tenant() tenant.Tenant {
	return tenant.Tenant{
		ID: r.ID, Name: r.Name, Weight: r.Weight, CreatedAt: r.CreatedAt, Disabled: r.Disabled,
		Limits: tenant.Limits{
			RequestsPerMinute: r.RPM, TokensPerMinute: r.TPM, MaxConcurrent: r.Conc,
			Budget: r.Budget, BudgetPeriod: tenant.BudgetPeriod(r.Period),
			AllowedModels: r.Models, MaxPriority: r.MaxPriority,
		},
	}
}

func decodeTenant(raw string) (tenant.Tenant, error) {
	var r tenantRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return tenant.Tenant{}, fmt.Errorf("redisstore: corrupt tenant record: %w", err)
	}
	return r.tenant(), nil
}

func (s *Store) key(parts ...string) string { return s.prefix + strings.Join(parts, ":") }

// now returns the clock argument of the scripts: "" selects Redis TIME.
func (s *Store) now() string {
	if s.clock == nil {
		return ""
	}
	return strconv.FormatInt(s.clock().UnixMicro(), 10)
}

// wallNow is the time used for fields written by Go (CreatedAt, RevokedAt).
func (s *Store) wallNow() time.Time {
	if s.clock == nil {
		return time.Now().UTC()
	}
	return s.clock().UTC()
}

// fail wraps a Redis error: connection problems and transient server states
// wrap tenant.ErrUnavailable (and are logged once per outage); a caller's
// cancellation is returned as such.
func (s *Store) fail(ctx context.Context, op string, err error) error {
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return fmt.Errorf("redisstore: %s: %w", op, ctx.Err())
	}
	if !unavailable(err) {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	if !s.down.Swap(true) {
		s.log.Error("redis unavailable", "op", op, "err", err)
	}
	return fmt.Errorf("redisstore: %s: %w: %w", op, tenant.ErrUnavailable, err)
}

// ok notes a successful round trip, logging the end of an outage.
func (s *Store) ok() {
	if s.down.Load() && s.down.Swap(false) {
		s.log.Info("redis available again")
	}
}

// unavailable reports whether err means Redis cannot serve now. Every error
// that is not a server reply is one (go-redis reports network, timeout,
// pool and closed-client failures in many forms); of the server's replies,
// only the transient states are.
func unavailable(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// CreateTenant implements tenant.Store.
func (s *Store) CreateTenant(ctx context.Context, t tenant.Tenant) (tenant.Tenant, error) {
	t, err := t.Normalize()
	if err != nil {
		return tenant.Tenant{}, err
	}
	t.CreatedAt = s.wallNow()
	raw, err := json.Marshal(toRecord(t))
	if err != nil {
		return tenant.Tenant{}, err
	}
	n, err := s.sc.createTenant.Run(ctx, s.rdb, []string{s.key("t", t.ID), s.key("tenants")}, raw, t.ID).Int()
	if err != nil {
		return tenant.Tenant{}, s.fail(ctx, "create tenant", err)
	}
	s.ok()
	if n != 0 {
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", t.ID, tenant.ErrExists)
	}
	return t, nil
}

// GetTenant implements tenant.Store.
func (s *Store) GetTenant(ctx context.Context, id string) (tenant.Tenant, error) {
	if err := tenant.ValidateID(id); err != nil {
		return tenant.Tenant{}, err
	}
	raw, err := s.rdb.Get(ctx, s.key("t", id)).Result()
	if errors.Is(err, redis.Nil) {
		s.ok()
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
	}
	if err != nil {
		return tenant.Tenant{}, s.fail(ctx, "get tenant", err)
	}
	s.ok()
	return decodeTenant(raw)
}

// ListTenants implements tenant.Store.
func (s *Store) ListTenants(ctx context.Context) ([]tenant.Tenant, error) {
	ids, err := s.rdb.SMembers(ctx, s.key("tenants")).Result()
	if err != nil {
		return nil, s.fail(ctx, "list tenants", err)
	}
	slices.Sort(ids)
	raws, err := s.mget(ctx, "t", ids)
	if err != nil {
		return nil, s.fail(ctx, "list tenants", err)
	}
	s.ok()
	out := make([]tenant.Tenant, 0, len(raws))
	for _, raw := range raws {
		t, err := decodeTenant(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// mget reads the string keys kind:<id> for ids, skipping missing ones.
func (s *Store) mget(ctx context.Context, kind string, ids []string) ([]string, error) {
	var out []string
	for chunk := range slices.Chunk(ids, 500) {
		keys := make([]string, len(chunk))
		for i, id := range chunk {
			keys[i] = s.key(kind, id)
		}
		vals, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			if str, ok := v.(string); ok {
				out = append(out, str)
			}
		}
	}
	return out, nil
}

// UpdateTenant implements tenant.Store. It keeps CreatedAt under WATCH so
// a concurrent delete makes it fail with ErrNotFound rather than resurrect
// the tenant.
func (s *Store) UpdateTenant(ctx context.Context, t tenant.Tenant) (tenant.Tenant, error) {
	t, err := t.Normalize()
	if err != nil {
		return tenant.Tenant{}, err
	}
	k := s.key("t", t.ID)
	var recErr error // a corrupt record, not a Redis failure
	for range 10 {
		err = s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			raw, err := tx.Get(ctx, k).Result()
			if err != nil {
				return err
			}
			old, err := decodeTenant(raw)
			if err != nil {
				recErr = err
				return err
			}
			t.CreatedAt = old.CreatedAt
			rec, err := json.Marshal(toRecord(t))
			if err != nil {
				recErr = err
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, k, rec, 0)
				return nil
			})
			return err
		}, k)
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	switch {
	case recErr != nil:
		return tenant.Tenant{}, recErr
	case errors.Is(err, redis.Nil):
		s.ok()
		return tenant.Tenant{}, fmt.Errorf("tenant %q: %w", t.ID, tenant.ErrNotFound)
	case err != nil:
		return tenant.Tenant{}, s.fail(ctx, "update tenant", err)
	}
	s.ok()
	return t, nil
}

// DeleteTenant implements tenant.Store.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	if err := tenant.ValidateID(id); err != nil {
		return err
	}
	keys := []string{s.key("t", id), s.key("tenants"), s.key("tk", id), s.key("rl", id), s.key("bg", id), s.key("cc", id)}
	n, err := s.sc.deleteTenant.Run(ctx, s.rdb, keys, id, s.key("k", ""), s.wallNow().Format(time.RFC3339Nano)).Int()
	if err != nil {
		return s.fail(ctx, "delete tenant", err)
	}
	s.ok()
	if n != 0 {
		return fmt.Errorf("tenant %q: %w", id, tenant.ErrNotFound)
	}
	return nil
}

// IssueKey implements tenant.Store.
func (s *Store) IssueKey(ctx context.Context, tenantID, name string) (string, tenant.KeyInfo, error) {
	if err := tenant.ValidateID(tenantID); err != nil {
		return "", tenant.KeyInfo{}, err
	}
	if err := tenant.ValidateKeyName(name); err != nil {
		return "", tenant.KeyInfo{}, err
	}
	for range 10 {
		key, id, err := tenant.NewKey()
		if err != nil {
			return "", tenant.KeyInfo{}, err
		}
		info := tenant.KeyInfo{
			ID: id, TenantID: tenantID, Prefix: tenant.KeyDisplayPrefix(id), Name: name, CreatedAt: s.wallNow(),
		}
		keys := []string{s.key("t", tenantID), s.key("k", id), s.key("tk", tenantID), s.key("keys")}
		n, err := s.sc.issueKey.Run(ctx, s.rdb, keys, id, tenantID, hex.EncodeToString(s.hasher.Sum(key)),
			info.Prefix, name, info.CreatedAt.Format(time.RFC3339Nano)).Int()
		if err != nil {
			return "", tenant.KeyInfo{}, s.fail(ctx, "issue key", err)
		}
		s.ok()
		switch n {
		case 0:
			return key, info, nil
		case 1:
			return "", tenant.KeyInfo{}, fmt.Errorf("tenant %q: %w", tenantID, tenant.ErrNotFound)
		}
		// 2: 40-bit key ID collision, draw again
	}
	return "", tenant.KeyInfo{}, errors.New("redisstore: issue key: no free key ID after 10 draws")
}

// ListKeys implements tenant.Store.
func (s *Store) ListKeys(ctx context.Context, f tenant.KeyFilter) ([]tenant.KeyInfo, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	set := s.key("keys")
	if f.TenantID != "" {
		set = s.key("tk", f.TenantID)
	}
	ids, err := s.rdb.SMembers(ctx, set).Result()
	if err != nil {
		return nil, s.fail(ctx, "list keys", err)
	}
	ids = slices.DeleteFunc(ids, func(id string) bool {
		return !strings.HasPrefix(tenant.KeyDisplayPrefix(id), f.Prefix)
	})
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, s.key("k", id))
		}
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, "list keys", err)
	}
	s.ok()
	out := make([]tenant.KeyInfo, 0, len(ids))
	for _, c := range cmds {
		h := c.Val()
		if len(h) == 0 || (f.TenantID != "" && h["tenant"] != f.TenantID) {
			continue
		}
		info := tenant.KeyInfo{ID: h["id"], TenantID: h["tenant"], Prefix: h["prefix"], Name: h["name"]}
		if info.CreatedAt, err = time.Parse(time.RFC3339Nano, h["created"]); err != nil {
			return nil, fmt.Errorf("redisstore: corrupt key record %q: %w", info.ID, err)
		}
		if r := h["revoked"]; r != "" {
			t, err := time.Parse(time.RFC3339Nano, r)
			if err != nil {
				return nil, fmt.Errorf("redisstore: corrupt key record %q: %w", info.ID, err)
			}
			info.RevokedAt = &t
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b tenant.KeyInfo) int {
		return cmp.Or(strings.Compare(a.TenantID, b.TenantID), a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// RevokeKey implements tenant.Store.
func (s *Store) RevokeKey(ctx context.Context, keyID string) error {
	if err := tenant.ValidateKeyID(keyID); err != nil {
		return err
	}
	n, err := s.sc.revokeKey.Run(ctx, s.rdb, []string{s.key("k", keyID)}, s.wallNow().Format(time.RFC3339Nano)).Int()
	if err != nil {
		return s.fail(ctx, "revoke key", err)
	}
	s.ok()
	if n != 0 {
		return fmt.Errorf("key %q: %w", keyID, tenant.ErrNotFound)
	}
	return nil
}

// Authenticate implements tenant.Authenticator with one round trip.
func (s *Store) Authenticate(ctx context.Context, presented string) (tenant.Principal, error) {
	id, err := tenant.ParseKey(presented)
	if err != nil {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	res, err := s.sc.auth.Run(ctx, s.rdb, []string{s.key("k", id)}, s.key("t", "")).StringSlice()
	if errors.Is(err, redis.Nil) {
		s.ok()
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	if err != nil {
		return tenant.Principal{}, s.fail(ctx, "authenticate", err)
	}
	s.ok()
	if len(res) != 4 {
		return tenant.Principal{}, fmt.Errorf("redisstore: authenticate: unexpected reply of %d values", len(res))
	}
	digest, err := hex.DecodeString(res[1])
	if err != nil || !s.hasher.Match(presented, digest) || res[2] != "" || res[3] == "" {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	t, err := decodeTenant(res[3])
	if err != nil {
		return tenant.Principal{}, err
	}
	if t.Disabled || t.ID != res[0] {
		return tenant.Principal{}, tenant.ErrUnauthenticated
	}
	return tenant.Principal{Tenant: t, KeyID: id}, nil
}

// SetModelLimits implements tenant.Store.
func (s *Store) SetModelLimits(ctx context.Context, m tenant.ModelLimits) error {
	m, err := m.Normalize()
	if err != nil {
		return err
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.key("m", m.Model), raw, 0)
		p.SAdd(ctx, s.key("models"), m.Model)
		return nil
	})
	if err != nil {
		return s.fail(ctx, "set model limits", err)
	}
	s.ok()
	return nil
}

// GetModelLimits implements tenant.Store.
func (s *Store) GetModelLimits(ctx context.Context, model string) (tenant.ModelLimits, error) {
	if err := tenant.ValidateModelName(model); err != nil {
		return tenant.ModelLimits{}, err
	}
	raw, err := s.rdb.Get(ctx, s.key("m", model)).Result()
	if errors.Is(err, redis.Nil) {
		s.ok()
		return tenant.ModelLimits{}, fmt.Errorf("model limits %q: %w", model, tenant.ErrNotFound)
	}
	if err != nil {
		return tenant.ModelLimits{}, s.fail(ctx, "get model limits", err)
	}
	s.ok()
	return decodeModel(raw)
}

func decodeModel(raw string) (tenant.ModelLimits, error) {
	var m tenant.ModelLimits
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return tenant.ModelLimits{}, fmt.Errorf("redisstore: corrupt model limits: %w", err)
	}
	return m, nil
}

// ListModelLimits implements tenant.ModelLimitsSource.
func (s *Store) ListModelLimits(ctx context.Context) ([]tenant.ModelLimits, error) {
	names, err := s.rdb.SMembers(ctx, s.key("models")).Result()
	if err != nil {
		return nil, s.fail(ctx, "list model limits", err)
	}
	slices.Sort(names)
	raws, err := s.mget(ctx, "m", names)
	if err != nil {
		return nil, s.fail(ctx, "list model limits", err)
	}
	s.ok()
	out := make([]tenant.ModelLimits, 0, len(raws))
	for _, raw := range raws {
		m, err := decodeModel(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// DeleteModelLimits implements tenant.Store.
func (s *Store) DeleteModelLimits(ctx context.Context, model string) error {
	if err := tenant.ValidateModelName(model); err != nil {
		return err
	}
	n, err := s.sc.deleteModel.Run(ctx, s.rdb, []string{s.key("m", model), s.key("models")}, model).Int()
	if err != nil {
		return s.fail(ctx, "delete model limits", err)
	}
	s.ok()
	if n != 0 {
		return fmt.Errorf("model limits %q: %w", model, tenant.ErrNotFound)
	}
	return nil
}

// limitKind maps the acquire script's denial codes.
func limitKind(code int64) (tenant.LimitKind, bool) {
	switch code {
	case kindModel:
		return tenant.KindModel, true
	case kindPriority:
		return tenant.KindPriority, true
	case kindTokens:
		return tenant.KindTokens, true
	case kindBudget:
		return tenant.KindBudget, true
	case kindRequests:
		return tenant.KindRequests, true
	case kindConcurrency:
		return tenant.KindConcurrency, true
	}
	return "", false
}

// Acquire implements tenant.Store with one script run.
func (s *Store) Acquire(ctx context.Context, tenantID string, req tenant.AcquireRequest) (*tenant.Lease, error) {
	if err := tenant.ValidateID(tenantID); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	leaseID := rand.Text()
	keys := []string{s.key("t", tenantID), s.key("m", req.Model), s.key("rl", tenantID), s.key("bg", tenantID), s.key("cc", tenantID)}
	r, err := s.sc.acquire.Run(ctx, s.rdb, keys, s.now(), tenantID, req.Model, req.Tokens, req.Priority,
		leaseID, s.leaseTTL.Microseconds(), tenant.ConcurrencyRetryAfter.Milliseconds()).Int64Slice()
	if err != nil {
		err = s.fail(ctx, "acquire", err)
		if s.failOpen && errors.Is(err, tenant.ErrUnavailable) {
			return s.degradedLease(leaseID, tenantID, req), nil
		}
		return nil, err
	}
	s.ok()
	v := func(i int) int64 { // replies of early denials are short
		if i < len(r) {
			return r[i]
		}
		return 0
	}
	ms := func(i int) time.Duration { return time.Duration(v(i)) * time.Millisecond }
	quota := tenant.Quota{
		LimitRequests: v(7), RemainingRequests: v(8), ResetRequests: ms(9),
		LimitTokens: v(10), RemainingTokens: v(11), ResetTokens: ms(12),
	}
	switch v(0) {
	case acqOK:
		return tenant.NewLease(tenant.LeaseInfo{
			ID: leaseID, TenantID: tenantID, Model: req.Model, HeldTokens: req.Tokens, Priority: req.Priority,
			AcquiredAt: time.UnixMicro(v(13)).UTC(), ExpiresAt: time.UnixMicro(v(14)).UTC(), Quota: quota,
		}, s), nil
	case acqNoTenant:
		return nil, fmt.Errorf("tenant %q: %w", tenantID, tenant.ErrNotFound)
	case acqDisabled:
		return nil, fmt.Errorf("tenant %q is disabled: %w", tenantID, tenant.ErrForbidden)
	case acqDenied:
		if kind, ok := limitKind(v(1)); ok {
			return nil, &tenant.LimitError{
				Kind: kind, Limit: v(2), Remaining: v(3), Reset: ms(4), RetryAfter: ms(5),
				Unsatisfiable: v(6) == 1, Quota: quota,
			}
		}
	}
	return nil, fmt.Errorf("redisstore: acquire: unexpected reply %v", r)
}

// degradedLease admits a request without checks while Redis is down.
func (s *Store) degradedLease(id, tenantID string, req tenant.AcquireRequest) *tenant.Lease {
	now := s.wallNow()
	s.log.Warn("admitting request without limits: redis unavailable and fail-open set", "tenant", tenantID)
	return tenant.NewLease(tenant.LeaseInfo{
		ID: id, TenantID: tenantID, Model: req.Model, Priority: req.Priority,
		AcquiredAt: now, ExpiresAt: now.Add(s.leaseTTL), Degraded: true,
	}, s)
}

// ReleaseLease implements tenant.LeaseBackend.
func (s *Store) ReleaseLease(ctx context.Context, info tenant.LeaseInfo, used tenant.Consumed) error {
	keys := []string{s.key("t", info.TenantID), s.key("rl", info.TenantID), s.key("bg", info.TenantID), s.key("cc", info.TenantID)}
	err := s.sc.release.Run(ctx, s.rdb, keys, s.now(), info.ID, info.HeldTokens, info.AcquiredAt.UnixMicro(),
		used.PromptTokens, used.CompletionTokens, info.Model, s.key("u", info.TenantID, ""),
		s.usageTTL.Milliseconds()).Err()
	if err != nil {
		return s.fail(ctx, "release", err)
	}
	s.ok()
	return nil
}

// RenewLease implements tenant.LeaseBackend.
func (s *Store) RenewLease(ctx context.Context, info tenant.LeaseInfo) (time.Time, error) {
	exp, err := s.sc.renew.Run(ctx, s.rdb, []string{s.key("cc", info.TenantID)}, s.now(), info.ID, s.leaseTTL.Microseconds()).Int64()
	if err != nil {
		return time.Time{}, s.fail(ctx, "renew", err)
	}
	s.ok()
	if exp < 0 {
		return time.Time{}, fmt.Errorf("lease %s: %w", info.ID, tenant.ErrLeaseExpired)
	}
	return time.UnixMicro(exp).UTC(), nil
}

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
			}
		}
		for _, m := range slices.Sorted(maps.Keys(byModel)) {
			out = append(out, *byModel[m])
		}
	}
	return out, nil
}
