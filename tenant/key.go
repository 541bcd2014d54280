package tenant

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"strings"
)

// API keys look like "wdn_<id>_<secret>": KeyPrefix, an 8-character key ID
// (40 random bits) and a 52-character secret (32 random bytes), both in
// lowercase unpadded base32 so a key is one word when double-clicked.
const (
	KeyPrefix    = "wdn_"
	keyIDLen     = 8
	keySecretLen = 52
	// KeyLen is the length of every well-formed key.
	KeyLen = len(KeyPrefix) + keyIDLen + 1 + keySecretLen
	// MinServerSecretLen is the shortest server secret NewKeyHasher accepts.
	MinServerSecretLen = 16
)

const keyAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// NewKey generates a fresh key from crypto/rand and returns the plaintext
// (shown once to the user) and its key ID.
func NewKey() (key, id string, err error) {
	var buf [5 + 32]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", "", fmt.Errorf("generate API key: %w", err)
	}
	enc := base32.NewEncoding(keyAlphabet).WithPadding(base32.NoPadding)
	id = enc.EncodeToString(buf[:5])
	return KeyPrefix + id + "_" + enc.EncodeToString(buf[5:]), id, nil
}

// ParseKey checks the syntax of a presented key and returns its key ID. The
// error wraps ErrUnauthenticated and says what is malformed, for logs only:
// responses must not reveal it.
func ParseKey(key string) (id string, err error) {
	if len(key) != KeyLen {
		return "", fmt.Errorf("%w: malformed key: length %d, want %d", ErrUnauthenticated, len(key), KeyLen)
	}
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return "", fmt.Errorf("%w: malformed key: missing %q prefix", ErrUnauthenticated, KeyPrefix)
	}
	id, secret := rest[:keyIDLen], rest[keyIDLen+1:]
	if rest[keyIDLen] != '_' || !inAlphabet(id) || !inAlphabet(secret) {
		return "", fmt.Errorf("%w: malformed key: bad characters", ErrUnauthenticated)
	}
	return id, nil
}

// ValidateKeyID reports whether id has the syntax of a key ID; the error
// wraps ErrInvalid.
func ValidateKeyID(id string) error {
	if len(id) != keyIDLen || !inAlphabet(id) {
		return fmt.Errorf("%w: key id %q must be %d characters of [a-z2-7]", ErrInvalid, id, keyIDLen)
	}
	return nil
}

// KeyDisplayPrefix returns the non-secret start of the key with this ID,
// "wdn_<id>", used as KeyInfo.Prefix.
func KeyDisplayPrefix(id string) string { return KeyPrefix + id }

func inAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// KeyHasher computes the stored form of API keys: HMAC-SHA-256 keyed with the
// server secret, over the whole key. A leaked store therefore reveals no
// usable key, and without the server secret no stored hash can be checked
// offline.
type KeyHasher struct {
	secret []byte
}

// NewKeyHasher returns a hasher for secret, which must be at least
// MinServerSecretLen bytes; the slice is copied.
func NewKeyHasher(secret []byte) (*KeyHasher, error) {
	if len(secret) < MinServerSecretLen {
		return nil, fmt.Errorf("%w: server secret is %d bytes, at least %d required", ErrInvalid, len(secret), MinServerSecretLen)
	}
	return &KeyHasher{secret: append([]byte(nil), secret...)}, nil
}

// Sum returns the stored digest of key.
func (h *KeyHasher) Sum(key string) []byte {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte(key))
	return m.Sum(nil)
}

// Match reports in constant time whether key hashes to digest.
func (h *KeyHasher) Match(key string, digest []byte) bool {
	return hmac.Equal(h.Sum(key), digest)
}
