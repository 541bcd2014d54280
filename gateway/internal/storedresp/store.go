package storedresp

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/warden-ai/warden/gateway/internal/api"
	"github.com/warden-ai/warden/tenant"
)

// Backend holds sealed records under (tenant, id). Implementations must
// be safe for concurrent use.
type Backend interface {
	// Put stores blob for tenant under id for ttl, then evicts the
	// tenant's oldest records until its records total at most maxBytes.
	Put(ctx context.Context, tenant, id string, blob []byte, ttl time.Duration, maxBytes int64) error
	// Get returns the blob, or ErrNotFound.
	Get(ctx context.Context, tenant, id string) ([]byte, error)
	// Delete removes the record, or returns ErrNotFound.
	Delete(ctx context.Context, tenant, id string) error
	// DeleteTenant removes every record of tenant.
	DeleteTenant(ctx context.Context, tenant string) error
}

// ErrNotFound is a Backend's answer for a record it does not hold.
var ErrNotFound = errors.New("storedresp: not found")

// Defaults for zero Options fields.
const (
	DefaultTTL            = 7 * 24 * time.Hour
	DefaultMaxTenantBytes = 64 << 20
)

// Options bound what is stored.
type Options struct {
	// TTL is how long a record lives; 0 means DefaultTTL.
	TTL time.Duration
	// MaxTenantBytes bounds one tenant's sealed records together; 0 means
	// DefaultMaxTenantBytes. A single record larger than it is refused.
	MaxTenantBytes int64
}

// Store seals records and keeps them in a Backend. It implements
// api.ResponseStore.
type Store struct {
	backend Backend
	secret  []byte
	opt     Options
}

var _ api.ResponseStore = (*Store)(nil)

// ErrTooLarge: the record alone exceeds the tenant's byte bound.
var ErrTooLarge = errors.New("storedresp: response larger than the tenant's storage bound")

// New returns a Store over backend whose keys are derived from secret
// (at least 32 bytes, the same on every gateway sharing the backend).
func New(backend Backend, secret []byte, opt Options) (*Store, error) {
	if len(secret) < 32 {
		return nil, errors.New("storedresp: secret shorter than 32 bytes")
	}
	if opt.TTL <= 0 {
		opt.TTL = DefaultTTL
	}
	if opt.MaxTenantBytes <= 0 {
		opt.MaxTenantBytes = DefaultMaxTenantBytes
	}
	return &Store{backend: backend, secret: secret, opt: opt}, nil
}

// Put seals r and stores it for p's tenant.
func (s *Store) Put(ctx context.Context, p api.Principal, r *api.StoredResponse) error {
	plain, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("storedresp: encoding: %w", err)
	}
	aead, err := s.aead(p)
	if err != nil {
		return err
	}
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce) // never fails (crypto/rand)
	blob := aead.Seal(nonce, nonce, plain, associated(p.Tenant, r.ID))
	if int64(len(blob)) > s.opt.MaxTenantBytes {
		return ErrTooLarge
	}
	if err := s.backend.Put(ctx, p.Tenant, r.ID, blob, s.opt.TTL, s.opt.MaxTenantBytes); err != nil {
		return unavailable(err)
	}
	return nil
}

// Get returns p's stored response id, or api.ErrResponseNotFound — also
// for a record p's tenant incarnation cannot open (stored by a deleted
// tenant of the same name), which is then removed.
func (s *Store) Get(ctx context.Context, p api.Principal, id string) (*api.StoredResponse, error) {
	blob, err := s.backend.Get(ctx, p.Tenant, id)
	if errors.Is(err, ErrNotFound) {
		return nil, api.ErrResponseNotFound
	}
	if err != nil {
		return nil, unavailable(err)
	}
	aead, err := s.aead(p)
	if err != nil {
		return nil, err
	}
	n := aead.NonceSize()
	var plain []byte
	if len(blob) >= n {
		plain, err = aead.Open(nil, blob[:n], blob[n:], associated(p.Tenant, id))
	}
	if len(blob) < n || err != nil {
		// Another incarnation's (or damaged): never readable by this one.
		_ = s.backend.Delete(ctx, p.Tenant, id)
		return nil, api.ErrResponseNotFound
	}
	var r api.StoredResponse
	if err := json.Unmarshal(plain, &r); err != nil || r.ID != id {
		return nil, fmt.Errorf("storedresp: record %s does not decode: %v", id, err)
	}
	return &r, nil
}

// Delete removes p's stored response id, or returns
// api.ErrResponseNotFound. A record p cannot open is not p's to delete.
func (s *Store) Delete(ctx context.Context, p api.Principal, id string) error {
	if _, err := s.Get(ctx, p, id); err != nil {
		return err
	}
	if err := s.backend.Delete(ctx, p.Tenant, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return api.ErrResponseNotFound
		}
		return unavailable(err)
	}
	return nil
}

// Purging wraps the tenant store the admin API writes through so that
// deleting a tenant also removes its stored responses (DESIGN I8: what
// belonged to the incarnation disappears with it). A re-created tenant
// could not read them anyway (another incarnation's key); this frees the
// space at once instead of at the TTL.
func Purging(ts tenant.Store, s *Store, log *slog.Logger) tenant.Store {
	return purging{Store: ts, responses: s, log: log}
}

type purging struct {
	tenant.Store
	responses *Store
	log       *slog.Logger
}

// DeleteTenant implements tenant.Store; a failure to remove the stored
// responses is logged, not returned: the tenant is gone either way.
func (p purging) DeleteTenant(ctx context.Context, id string) error {
	if err := p.Store.DeleteTenant(ctx, id); err != nil {
		return err
	}
	if err := p.responses.backend.DeleteTenant(ctx, id); err != nil {
		p.log.WarnContext(ctx, "stored responses of a deleted tenant not removed; they expire with their TTL",
			"tenant", id, "err", err)
	}
	return nil
}

// unavailable marks a backend failure as the store being unavailable.
func unavailable(err error) error {
	return fmt.Errorf("storedresp: %w: %w", api.ErrResponseStoreUnavailable, err)
}

// aead is the cipher of p's tenant incarnation.
func (s *Store) aead(p api.Principal) (cipher.AEAD, error) {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte("warden stored responses v1\x00"))
	m.Write([]byte(p.Tenant))
	m.Write([]byte{0})
	m.Write([]byte(p.Incarnation))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		return nil, fmt.Errorf("storedresp: %w", err)
	}
	return cipher.NewGCM(block)
}

// associated binds a sealed record to its tenant and ID, so a blob copied
// under another key does not open.
func associated(tenant, id string) []byte {
	return []byte(tenant + "\x00" + id)
}
