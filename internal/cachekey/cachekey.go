// Package cachekey names prefix-cache content (DESIGN I3, I8): the cache
// domain whose requests may share sealed KV pages, derived server-side from
// the tenant, and the chain hash that identifies a page of prompt KV by
// every token up to and including it.
//
// A domain is HMAC-SHA256(server secret, tenant, incarnation[, key]): no
// client field enters it, so a client can neither choose nor widen it; a
// tenant setting may only narrow it (Mode key: one domain per API key) or
// switch caching off. The incarnation is the tenant record's immutable
// random value (tenant.Tenant.Incarnation), so a tenant deleted and
// re-created under the same ID, or re-created from an exported copy,
// derives other domains than the one before and never meets its pages,
// whether or not they were evicted. The chain hash of page i covers the domain, the model/format
// version and tokens [0, (i+1)·pageTokens), so equal hashes mean equal KV
// in one domain and one model, and two domains never produce the same
// hash for the same tokens.
//
// A LoRA adapter changes the KV of every token (DESIGN I8a), so the
// adapter's content hash enters both: the domain (Scope.Adapter) and, on
// its own, the chain hash, so that pages computed under one adapter never
// match a request of another adapter or of the base model even where a
// caller presents the same domain. Both mix the adapter in only when
// there is one: base-model domains and hashes are those of before, so
// workers and gateways of one prefix-cache version agree whatever their
// build.
package cachekey

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/warden-ai/warden/internal/brokenmode"
)

// MetadataDomain is the gRPC metadata key with which the gateway passes a
// request's cache domain (64 hex digits) to a worker's Generate. Absent
// means the request uses no cache. Only the authenticated gateway can
// call a worker (I10); no client field reaches it.
const MetadataDomain = "warden-cache-domain"

// MetadataCachedTokens is the response header in which a worker's
// Generate reports how many prompt tokens it reused from the cache
// (usage.prompt_tokens_details.cached_tokens).
const MetadataCachedTokens = "warden-cached-tokens"

// Domain is a cache domain: requests share sealed pages only within one.
type Domain [32]byte

// Hash is the chain hash of one full page of prompt tokens.
type Hash [32]byte

// Mode is a tenant's prefix-cache setting.
type Mode string

// Modes. The zero Mode means ModeTenant.
const (
	// ModeTenant: one domain per tenant (the default).
	ModeTenant Mode = "tenant"
	// ModeKey: one domain per API key of the tenant (narrower).
	ModeKey Mode = "key"
	// ModeOff: no caching; requests share nothing.
	ModeOff Mode = "off"
)

// ParseMode checks a configured mode; "" is ModeTenant.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "", ModeTenant:
		return ModeTenant, nil
	case ModeKey, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("cachekey: unknown prefix cache mode %q (want tenant, key or off)", s)
}

// MinSecretBytes is the shortest server secret Derive accepts.
const MinSecretBytes = 16

// Scope is what a domain is derived from, all of it server-side: the
// tenant's ID and incarnation (from its stored record), the ID of the
// API key the request was authenticated with, and the content hash of the
// LoRA adapter the request runs under (lora.Hash; "" for the base model),
// which the gateway resolved from its registry.
type Scope struct {
	Tenant, Incarnation, KeyID string
	Adapter                    string
}

// Derive returns the cache domain of a request in scope s under mode, and
// false when the request must not use the cache (ModeOff, an empty tenant
// or incarnation, a ModeKey request without a key, or a secret shorter
// than MinSecretBytes). Only server-side values enter it.
func Derive(secret []byte, mode Mode, s Scope) (Domain, bool) {
	if len(secret) < MinSecretBytes || s.Tenant == "" || s.Incarnation == "" {
		return Domain{}, false
	}
	if brokenmode.On(brokenmode.SharedCache) {
		s = Scope{"every-tenant", "every-incarnation", "every-key", ""} // test-only build: see internal/brokenmode
	}
	mac := hmac.New(sha256.New, secret)
	switch mode {
	case "", ModeTenant:
		writeField(mac, "tenant")
		writeField(mac, s.Tenant)
		writeField(mac, s.Incarnation)
	case ModeKey:
		if s.KeyID == "" {
			return Domain{}, false
		}
		writeField(mac, "key")
		writeField(mac, s.Tenant)
		writeField(mac, s.Incarnation)
		writeField(mac, s.KeyID)
	default:
		return Domain{}, false
	}
	if s.Adapter != "" {
		// Last and labelled: a base-model domain stays what it was, and
		// no adapter domain equals a base one or another adapter's.
		writeField(mac, "adapter")
		writeField(mac, s.Adapter)
	}
	var d Domain
	mac.Sum(d[:0])
	return d, true
}

// writeField writes s length-prefixed, so field boundaries cannot shift.
func writeField(w interface{ Write([]byte) (int, error) }, s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	w.Write(n[:])
	w.Write([]byte(s))
}

// Chain labels: the first page's hash input starts with one of them, so
// a base-model chain and an adapter's never share an input.
const (
	chainLabel        = "warden-prefix-v1"
	chainAdapterLabel = "warden-prefix-a1"
)

// Chain returns the chain hashes of the full pages of tokens: element i
// covers tokens [0, (i+1)·pageTokens) in domain d under model/format
// version and the LoRA adapter whose content hash is adapter ("" for the
// base model, whose hashes do not depend on adapters at all). A trailing
// partial page has no hash. pageTokens must be > 0.
func Chain(d Domain, version uint64, adapter string, tokens []int32, pageTokens int) []Hash {
	n := len(tokens) / pageTokens
	out := make([]Hash, n)
	var prev Hash
	buf := make([]byte, 0, 16+32+8+8+len(adapter)+4*pageTokens)
	for i := range n {
		buf = buf[:0]
		if i == 0 {
			if adapter == "" {
				buf = append(buf, chainLabel...)
			} else {
				buf = append(buf, chainAdapterLabel...)
			}
			buf = append(buf, d[:]...)
			buf = binary.LittleEndian.AppendUint64(buf, version)
			if adapter != "" {
				buf = binary.LittleEndian.AppendUint64(buf, uint64(len(adapter)))
				buf = append(buf, adapter...)
			}
		} else {
			buf = append(buf, prev[:]...)
		}
		for _, t := range tokens[i*pageTokens : (i+1)*pageTokens] {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
		}
		prev = sha256.Sum256(buf)
		out[i] = prev
	}
	return out
}
