package tenant

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestNewKeyFormatAndUniqueness(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		key, id, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if len(key) != KeyLen || !strings.HasPrefix(key, KeyPrefix+id+"_") {
			t.Fatalf("key %q (id %q) is not wdn_<id>_<secret> of length %d", key, id, KeyLen)
		}
		got, err := ParseKey(key)
		if err != nil || got != id {
			t.Fatalf("ParseKey(NewKey()) = %q, %v; want %q", got, err, id)
		}
		if seen[key] {
			t.Fatalf("duplicate key %q", key)
		}
		seen[key] = true
	}
}

func TestParseKeyRejects(t *testing.T) {
	key, _, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ key, reason string }{
		"empty":         {"", "length"},
		"too long":      {key + "a", "length"},
		"prefix":        {"sk__" + key[4:], "prefix"},
		"separator":     {key[:12] + "-" + key[13:], "characters"},
		"uppercase id":  {key[:4] + strings.ToUpper(key[4:12]) + key[12:], "characters"},
		"digit 1":       {key[:len(key)-1] + "1", "characters"},
		"padding":       {key[:len(key)-1] + "=", "characters"},
		"multibyte":     {key[:len(key)-2] + "é", "characters"},
		"bearer prefix": {"Bearer " + key[7:], "prefix"},
	} {
		id, err := ParseKey(c.key)
		if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), c.reason) || id != "" {
			t.Errorf("%s: ParseKey(%q) = %q, %v; want ErrUnauthenticated about %s", name, c.key, id, err, c.reason)
		}
	}
}

func TestKeyHasher(t *testing.T) {
	if _, err := NewKeyHasher(make([]byte, MinServerSecretLen-1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short secret: %v, want ErrInvalid", err)
	}
	secret := []byte("0123456789abcdef")
	h, err := NewKeyHasher(secret)
	if err != nil {
		t.Fatal(err)
	}
	secret[0] = 'X' // the hasher keeps its own copy
	h2, _ := NewKeyHasher([]byte("0123456789abcdef"))
	other, _ := NewKeyHasher([]byte("another-secret-of-some-length"))
	key, _, _ := NewKey()
	sum := h.Sum(key)
	if len(sum) != 32 || !bytes.Equal(sum, h2.Sum(key)) {
		t.Fatalf("digest %x is not a stable 32-byte HMAC", sum)
	}
	if bytes.Contains(sum, []byte(key[13:])) || bytes.Equal(sum, other.Sum(key)) {
		t.Fatal("digest does not depend on the server secret")
	}
	wrong := []byte(key)
	wrong[len(wrong)-1] ^= 1 // another last character
	if !h.Match(key, sum) || h.Match(string(wrong), sum) || other.Match(key, sum) || h.Match(key, sum[:31]) {
		t.Fatal("Match accepts a wrong key, secret or digest, or rejects the right one")
	}
}

func TestValidateKeyID(t *testing.T) {
	if err := ValidateKeyID("abcd2345"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "abcd234", "abcd23456", "ABCD2345", "abcd2301", "wdn_abcd"} {
		if err := ValidateKeyID(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateKeyID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// FuzzParseKey checks that any presented string is either rejected with
// ErrUnauthenticated or parsed into an ID that is the key's own.
func FuzzParseKey(f *testing.F) {
	key, _, _ := NewKey()
	for _, s := range []string{"", key, "wdn_", "wdn_abcdefgh_", key + "x", "wdn_abcdefgh-" + key[13:], "\xff" + key[1:]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseKey(s)
		if err != nil {
			if !errors.Is(err, ErrUnauthenticated) || id != "" {
				t.Fatalf("ParseKey(%q) = %q, %v", s, id, err)
			}
			return
		}
		if len(s) != KeyLen || s[:len(KeyPrefix)+len(id)] != KeyPrefix+id || ValidateKeyID(id) != nil {
			t.Fatalf("ParseKey(%q) accepted id %q", s, id)
		}
	})
}
