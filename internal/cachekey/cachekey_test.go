package cachekey

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

var secret = bytes.Repeat([]byte{7}, MinSecretBytes)

// TestDeriveSeparatesTenantsKeysAndModes: the domain depends on the
// tenant, its incarnation, the key (ModeKey only), the mode and the
// secret, and on field boundaries.
func TestDeriveSeparatesTenantsKeysAndModes(t *testing.T) {
	a, okA := Derive(secret, ModeTenant, Scope{Tenant: "a", Incarnation: "i1", KeyID: "k1"})
	a2, _ := Derive(secret, "", Scope{Tenant: "a", Incarnation: "i1", KeyID: "k2"})
	b, _ := Derive(secret, ModeTenant, Scope{Tenant: "b", Incarnation: "i1", KeyID: "k1"})
	ak1, _ := Derive(secret, ModeKey, Scope{Tenant: "a", Incarnation: "i1", KeyID: "k1"})
	ak2, _ := Derive(secret, ModeKey, Scope{Tenant: "a", Incarnation: "i1", KeyID: "k2"})
	if !okA || a != a2 {
		t.Fatal("one tenant's keys must share the tenant domain")
	}
	if a == b || ak1 == ak2 || ak1 == a {
		t.Fatal("domains of different tenants, keys or modes collide")
	}
	// A re-created tenant (same ID, new incarnation) gets other domains,
	// in both modes.
	re, _ := Derive(secret, ModeTenant, Scope{Tenant: "a", Incarnation: "i2", KeyID: "k1"})
	rek1, _ := Derive(secret, ModeKey, Scope{Tenant: "a", Incarnation: "i2", KeyID: "k1"})
	if re == a || rek1 == ak1 {
		t.Fatal("a new incarnation of tenant a derives the old incarnation's domains")
	}
	other, _ := Derive(bytes.Repeat([]byte{8}, MinSecretBytes), ModeTenant, Scope{Tenant: "a", Incarnation: "i1"})
	if other == a {
		t.Fatal("the domain does not depend on the server secret")
	}
	// Independent reference: HMAC-SHA256 of the length-prefixed fields.
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte{6, 0, 0, 0, 0, 0, 0, 0})
	mac.Write([]byte("tenant"))
	mac.Write([]byte{1, 0, 0, 0, 0, 0, 0, 0})
	mac.Write([]byte("a"))
	mac.Write([]byte{2, 0, 0, 0, 0, 0, 0, 0})
	mac.Write([]byte("i1"))
	if !bytes.Equal(mac.Sum(nil), a[:]) {
		t.Fatal("Derive is not HMAC-SHA256(secret, tenant, incarnation)")
	}
	// Field boundaries cannot be shifted: tenant "ab"+key "c" ≠ "a"+"bc",
	// incarnation "i1"+key "c" ≠ "i1c"+"".
	x, _ := Derive(secret, ModeKey, Scope{Tenant: "ab", Incarnation: "i1", KeyID: "c"})
	y, _ := Derive(secret, ModeKey, Scope{Tenant: "a", Incarnation: "i1", KeyID: "bc"})
	z, _ := Derive(secret, ModeKey, Scope{Tenant: "a", Incarnation: "i1b", KeyID: "c"})
	if x == y || y == z {
		t.Fatal("tenant/incarnation/key boundary is ambiguous")
	}
}

func TestDeriveRefuses(t *testing.T) {
	for _, c := range []struct {
		secret []byte
		mode   Mode
		scope  Scope
	}{
		{secret, ModeOff, Scope{"a", "i1", "k", ""}},
		{secret, ModeOff, Scope{"a", "i1", "k", adapterA}}, // an adapter does not turn caching on
		{secret, ModeKey, Scope{"a", "i1", "", ""}},
		{secret, ModeTenant, Scope{"", "i1", "k", ""}},
		{secret, ModeTenant, Scope{"a", "", "k", ""}}, // a tenant without incarnation shares nothing
		{secret, ModeKey, Scope{"a", "", "k", ""}},
		{secret[:MinSecretBytes-1], ModeTenant, Scope{"a", "i1", "k", ""}},
		{secret, Mode("everyone"), Scope{"a", "i1", "k", ""}},
	} {
		if _, ok := Derive(c.secret, c.mode, c.scope); ok {
			t.Errorf("Derive(%d-byte secret, %q, %+v) enabled caching", len(c.secret), c.mode, c.scope)
		}
	}
	if _, err := ParseMode("global"); err == nil {
		t.Error("ParseMode accepted a mode that would widen the domain")
	}
	if m, err := ParseMode(""); err != nil || m != ModeTenant {
		t.Errorf("ParseMode(\"\") = %q, %v", m, err)
	}
}

func TestChainCoversEveryTokenBeforeThePage(t *testing.T) {
	d, _ := Derive(secret, ModeTenant, Scope{Tenant: "a", Incarnation: "i1"})
	e, _ := Derive(secret, ModeTenant, Scope{Tenant: "b", Incarnation: "i1"})
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	h := Chain(d, 1, "", toks, 4)
	if len(h) != 2 {
		t.Fatalf("%d hashes for 2 full pages", len(h))
	}
	if got := Chain(d, 1, "", toks[:8], 4); got[0] != h[0] || got[1] != h[1] {
		t.Fatal("the trailing partial page changed the full pages' hashes")
	}
	changed := append([]int32(nil), toks...)
	changed[0] = 100 // first page differs → second page's hash differs too
	if got := Chain(d, 1, "", changed, 4); got[1] == h[1] || got[0] == h[0] {
		t.Fatal("page 1's hash does not cover page 0's tokens")
	}
	if got := Chain(e, 1, "", toks, 4); got[0] == h[0] {
		t.Fatal("two domains produce the same hash")
	}
	if got := Chain(d, 2, "", toks, 4); got[0] == h[0] {
		t.Fatal("two model versions produce the same hash")
	}
}

// Two adapter content hashes (the form of lora.Hash).
const (
	adapterA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	adapterB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// TestDeriveSeparatesAdapters (I8a): one tenant's requests under adapter
// A, under adapter B and on the base model derive three domains, in both
// modes; the base-model domain is the one derived without an adapter
// (HMAC of the same fields as before adapters existed).
func TestDeriveSeparatesAdapters(t *testing.T) {
	for _, mode := range []Mode{ModeTenant, ModeKey} {
		s := Scope{Tenant: "a", Incarnation: "i1", KeyID: "k1"}
		base, ok := Derive(secret, mode, s)
		s.Adapter = adapterA
		a, okA := Derive(secret, mode, s)
		s.Adapter = adapterB
		b, okB := Derive(secret, mode, s)
		if !ok || !okA || !okB {
			t.Fatalf("%s: an adapter request lost its cache", mode)
		}
		if a == base || b == base || a == b {
			t.Fatalf("%s: domains of adapters A, B and the base model collide", mode)
		}
		// Same adapter, other tenant: another domain too.
		if o, _ := Derive(secret, mode, Scope{Tenant: "b", Incarnation: "i1", KeyID: "k1", Adapter: adapterA}); o == a {
			t.Fatalf("%s: two tenants share adapter A's domain", mode)
		}
	}
	// The adapter field is length-prefixed and labelled: a key ID that
	// spells the adapter field does not produce the adapter's domain.
	withAdapter, _ := Derive(secret, ModeKey, Scope{Tenant: "a", Incarnation: "i1", KeyID: "k", Adapter: "x"})
	spelled, _ := Derive(secret, ModeKey, Scope{Tenant: "a", Incarnation: "i1", KeyID: "k\x07\x00\x00\x00\x00\x00\x00\x00adapter\x01\x00\x00\x00\x00\x00\x00\x00x"})
	if withAdapter == spelled {
		t.Fatal("the adapter field's boundary is ambiguous")
	}
	// Base-model domains are unchanged by adapters' existence.
	mac := hmac.New(sha256.New, secret)
	for _, f := range []string{"tenant", "a", "i1"} {
		mac.Write([]byte{byte(len(f)), 0, 0, 0, 0, 0, 0, 0})
		mac.Write([]byte(f))
	}
	if base, _ := Derive(secret, ModeTenant, Scope{Tenant: "a", Incarnation: "i1"}); !bytes.Equal(mac.Sum(nil), base[:]) {
		t.Fatal("a base-model domain changed")
	}
}

// TestChainCoversAdapter (I8a): in one domain (a caller that presents the
// same domain for all three), the same tokens hash differently under
// adapters A, B and the base model, on every page; the base-model chain
// is the adapter-free one of before (SHA-256 of the v1 label, domain,
// version and tokens).
func TestChainCoversAdapter(t *testing.T) {
	d, _ := Derive(secret, ModeTenant, Scope{Tenant: "a", Incarnation: "i1"})
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	base := Chain(d, 1, "", toks, 4)
	a := Chain(d, 1, adapterA, toks, 4)
	b := Chain(d, 1, adapterB, toks, 4)
	for i := range base {
		if a[i] == base[i] || b[i] == base[i] || a[i] == b[i] {
			t.Fatalf("page %d: chain hashes of adapters A, B and the base model collide", i)
		}
	}
	if again := Chain(d, 1, adapterA, toks, 4); again[1] != a[1] {
		t.Fatal("the adapter chain is not deterministic")
	}
	buf := append([]byte("warden-prefix-v1"), d[:]...)
	buf = append(buf, 1, 0, 0, 0, 0, 0, 0, 0)
	for _, tok := range toks[:4] {
		buf = append(buf, byte(tok), 0, 0, 0)
	}
	if sha256.Sum256(buf) != base[0] {
		t.Fatal("the base-model chain hash changed")
	}
}
