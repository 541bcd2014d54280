package cachekey

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

var secret = bytes.Repeat([]byte{7}, MinSecretBytes)

func TestDeriveSeparatesTenantsKeysAndModes(t *testing.T) {
	a, okA := Derive(secret, ModeTenant, "a", "k1")
	a2, _ := Derive(secret, "", "a", "k2")
	b, _ := Derive(secret, ModeTenant, "b", "k1")
	ak1, _ := Derive(secret, ModeKey, "a", "k1")
	ak2, _ := Derive(secret, ModeKey, "a", "k2")
	if !okA || a != a2 {
		t.Fatal("one tenant's keys must share the tenant domain")
	}
	if a == b || ak1 == ak2 || ak1 == a {
		t.Fatal("domains of different tenants, keys or modes collide")
	}
	other, _ := Derive(bytes.Repeat([]byte{8}, MinSecretBytes), ModeTenant, "a", "")
	if other == a {
		t.Fatal("the domain does not depend on the server secret")
	}
	// Independent reference: HMAC-SHA256 of the length-prefixed fields.
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte{6, 0, 0, 0, 0, 0, 0, 0})
	mac.Write([]byte("tenant"))
	mac.Write([]byte{1, 0, 0, 0, 0, 0, 0, 0})
	mac.Write([]byte("a"))
	if !bytes.Equal(mac.Sum(nil), a[:]) {
		t.Fatal("Derive is not HMAC-SHA256(secret, tenant)")
	}
	// Field boundaries cannot be shifted: tenant "ab"+key "c" ≠ "a"+"bc".
	x, _ := Derive(secret, ModeKey, "ab", "c")
	y, _ := Derive(secret, ModeKey, "a", "bc")
	if x == y {
		t.Fatal("tenant/key boundary is ambiguous")
	}
}

func TestDeriveRefuses(t *testing.T) {
	for _, c := range []struct {
		secret        []byte
		mode          Mode
		tenant, keyID string
	}{
		{secret, ModeOff, "a", "k"},
		{secret, ModeKey, "a", ""},
		{secret, ModeTenant, "", "k"},
		{secret[:MinSecretBytes-1], ModeTenant, "a", "k"},
		{secret, Mode("everyone"), "a", "k"},
	} {
		if _, ok := Derive(c.secret, c.mode, c.tenant, c.keyID); ok {
			t.Errorf("Derive(%d-byte secret, %q, %q, %q) enabled caching", len(c.secret), c.mode, c.tenant, c.keyID)
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
	d, _ := Derive(secret, ModeTenant, "a", "")
	e, _ := Derive(secret, ModeTenant, "b", "")
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	h := Chain(d, 1, toks, 4)
	if len(h) != 2 {
		t.Fatalf("%d hashes for 2 full pages", len(h))
	}
	if got := Chain(d, 1, toks[:8], 4); got[0] != h[0] || got[1] != h[1] {
		t.Fatal("the trailing partial page changed the full pages' hashes")
	}
	changed := append([]int32(nil), toks...)
	changed[0] = 100 // first page differs → second page's hash differs too
	if got := Chain(d, 1, changed, 4); got[1] == h[1] || got[0] == h[0] {
		t.Fatal("page 1's hash does not cover page 0's tokens")
	}
	if got := Chain(e, 1, toks, 4); got[0] == h[0] {
		t.Fatal("two domains produce the same hash")
	}
	if got := Chain(d, 2, toks, 4); got[0] == h[0] {
		t.Fatal("two model versions produce the same hash")
	}
}
