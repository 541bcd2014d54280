package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warden-ai/warden/tenant"
)

// Adapters: a JSON record per name ("ad:<name>"), the set of names
// ("adapters"), the files per content hash as a list of values of at most
// tenant.AdapterChunkBytes ("ab:<hash>": an 8-byte little-endian length
// of adapter_config.json, its bytes, then the safetensors bytes), and the
// names referencing each hash ("abr:<hash>"), so that the last name's
// deletion deletes the files.

// blobStaging bounds how long files written for a PutAdapter that never
// completed (the gateway died between writing and recording) are kept.
const blobStaging = time.Hour

// putAdapterSrc records an adapter. KEYS: record, name set, files, the
// hash's name set, then tenant records (owner, shared). ARGV: record JSON,
// name, "create" or "update", hash. Returns 0; 1 (name taken, create);
// 2 (no such adapter, update); 3 (files gone: write them again); 10+i
// (tenant KEYS[5+i] missing).
const putAdapterSrc = `
local cur = redis.call('GET', KEYS[1])
if ARGV[3] == 'create' then
  if cur then return 1 end
  if redis.call('EXISTS', KEYS[3]) == 0 then return 3 end
elseif not cur or cjson.decode(cur).hash ~= ARGV[4] then
  return 2
end
for i = 5, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then return 10 + i - 5 end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('PERSIST', KEYS[3])
return 0
`

// deleteAdapterSrc removes an adapter and, with the hash's last name, its
// files. KEYS: record, name set, hash's name set, files. ARGV: name, hash.
// Returns 0; 1 (no such adapter); 2 (the name now holds another hash).
const deleteAdapterSrc = `
local cur = redis.call('GET', KEYS[1])
if not cur then return 1 end
if cjson.decode(cur).hash ~= ARGV[2] then return 2 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
if redis.call('SCARD', KEYS[3]) == 0 then redis.call('DEL', KEYS[4]) end
return 0
`

var (
	putAdapterScript    = redis.NewScript(putAdapterSrc)
	deleteAdapterScript = redis.NewScript(deleteAdapterSrc)
)

var _ tenant.AdapterStore = (*Store)(nil)

// maxAdapterRaces bounds the retries of an adapter write that raced a
// concurrent one (files deleted under a create, a name re-created under
// a delete).
const maxAdapterRaces = 3

// PutAdapter implements tenant.AdapterStore.
func (s *Store) PutAdapter(ctx context.Context, a tenant.Adapter, configJSON, weights []byte) (tenant.Adapter, error) {
	a, err := a.Normalize()
	if err != nil {
		return tenant.Adapter{}, err
	}
	if err := tenant.CheckAdapterFiles(a, configJSON, weights); err != nil {
		return tenant.Adapter{}, err
	}
	a.CreatedAt = s.wallNow()
	for range maxAdapterRaces {
		if err := s.writeAdapterFiles(ctx, a.Hash, configJSON, weights); err != nil {
			return tenant.Adapter{}, err
		}
		code, err := s.recordAdapter(ctx, a, "create")
		if err != nil {
			return tenant.Adapter{}, err
		}
		switch code {
		case 0:
			return a, nil
		case 1:
			return tenant.Adapter{}, fmt.Errorf("adapter %q: %w", a.Name, tenant.ErrExists)
		case 3:
			continue // the files' last name was deleted meanwhile
		}
		return tenant.Adapter{}, s.missingTenant(a, code)
	}
	return tenant.Adapter{}, fmt.Errorf("redisstore: put adapter %q: concurrent deletions of its files: %w", a.Name, tenant.ErrUnavailable)
}

// missingTenant names the tenant of a putAdapterSrc code 10+i.
func (s *Store) missingTenant(a tenant.Adapter, code int64) error {
	ids := append([]string{a.Owner}, a.SharedWith...)
	if i := int(code - 10); i >= 0 && i < len(ids) {
		return fmt.Errorf("tenant %q: %w", ids[i], tenant.ErrNotFound)
	}
	return fmt.Errorf("redisstore: put adapter: unexpected reply %d", code)
}

// recordAdapter runs putAdapterSrc.
func (s *Store) recordAdapter(ctx context.Context, a tenant.Adapter, mode string) (int64, error) {
	rec, err := json.Marshal(a)
	if err != nil {
		return 0, fmt.Errorf("redisstore: %w", err)
	}
	keys := []string{s.key("ad", a.Name), s.key("adapters"), s.key("ab", a.Hash), s.key("abr", a.Hash)}
	tenants := a.SharedWith
	if mode == "create" {
		tenants = append([]string{a.Owner}, tenants...)
	}
	for _, id := range tenants {
		keys = append(keys, s.key("t", id))
	}
	code, err := putAdapterScript.Run(ctx, s.rdb, keys, rec, a.Name, mode, a.Hash).Int64()
	if err != nil {
		return 0, s.fail(ctx, "put adapter", err)
	}
	s.ok()
	if mode == "update" && code >= 10 {
		code++ // the owner is not among the checked tenants
	}
	return code, nil
}

// writeAdapterFiles stores the files under hash unless they are there:
// written to a staging key, then renamed into place, so a reader never
// sees a part of them.
func (s *Store) writeAdapterFiles(ctx context.Context, hash string, configJSON, weights []byte) error {
	dst := s.key("ab", hash)
	n, err := s.rdb.Exists(ctx, dst).Result()
	if err != nil {
		return s.fail(ctx, "put adapter files", err)
	}
	if n == 1 {
		return nil
	}
	blob := make([]byte, 8, 8+len(configJSON)+len(weights))
	binary.LittleEndian.PutUint64(blob, uint64(len(configJSON)))
	blob = append(append(blob, configJSON...), weights...)
	tmp := s.key("abtmp", hash, rand.Text())
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for c := range slices.Chunk(blob, tenant.AdapterChunkBytes) {
			p.RPush(ctx, tmp, c)
		}
		p.PExpire(ctx, tmp, blobStaging)
		return nil
	})
	if err != nil {
		return s.fail(ctx, "put adapter files", err)
	}
	if moved, err := s.rdb.RenameNX(ctx, tmp, dst).Result(); err != nil {
		return s.fail(ctx, "put adapter files", err)
	} else if !moved {
		s.rdb.Del(ctx, tmp) // written concurrently; the staging copy expires otherwise
	}
	s.ok()
	return nil
}

// GetAdapter implements tenant.AdapterStore.
func (s *Store) GetAdapter(ctx context.Context, name string) (tenant.Adapter, error) {
	if err := tenant.ValidateModelName(name); err != nil {
		return tenant.Adapter{}, err
	}
	b, err := s.rdb.Get(ctx, s.key("ad", name)).Bytes()
	if errors.Is(err, redis.Nil) {
		s.ok()
		return tenant.Adapter{}, fmt.Errorf("adapter %q: %w", name, tenant.ErrNotFound)
	}
	if err != nil {
		return tenant.Adapter{}, s.fail(ctx, "get adapter", err)
	}
	s.ok()
	return decodeAdapter(b)
}

func decodeAdapter(b []byte) (tenant.Adapter, error) {
	var a tenant.Adapter
	if err := json.Unmarshal(b, &a); err != nil {
		return tenant.Adapter{}, fmt.Errorf("redisstore: adapter record: %w", err)
	}
	return a, nil
}

// ListAdapters implements tenant.AdapterStore.
func (s *Store) ListAdapters(ctx context.Context) ([]tenant.Adapter, error) {
	names, err := s.rdb.SMembers(ctx, s.key("adapters")).Result()
	if err != nil {
		return nil, s.fail(ctx, "list adapters", err)
	}
	slices.Sort(names)
	out := make([]tenant.Adapter, 0, len(names))
	if len(names) == 0 {
		s.ok()
		return out, nil
	}
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = s.key("ad", n)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, s.fail(ctx, "list adapters", err)
	}
	s.ok()
	for _, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // deleted between the two reads
		}
		a, err := decodeAdapter([]byte(str))
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// UpdateAdapter implements tenant.AdapterStore.
func (s *Store) UpdateAdapter(ctx context.Context, a tenant.Adapter) (tenant.Adapter, error) {
	cur, err := s.GetAdapter(ctx, a.Name)
	if err != nil {
		return tenant.Adapter{}, err
	}
	cur.SharedWith, cur.Pinned = a.SharedWith, a.Pinned
	if cur, err = cur.Normalize(); err != nil {
		return tenant.Adapter{}, err
	}
	code, err := s.recordAdapter(ctx, cur, "update")
	switch {
	case err != nil:
		return tenant.Adapter{}, err
	case code == 0:
		return cur, nil
	case code == 2:
		return tenant.Adapter{}, fmt.Errorf("adapter %q: %w", a.Name, tenant.ErrNotFound)
	}
	return tenant.Adapter{}, s.missingTenant(cur, code)
}

// DeleteAdapter implements tenant.AdapterStore.
func (s *Store) DeleteAdapter(ctx context.Context, name string) error {
	for range maxAdapterRaces {
		a, err := s.GetAdapter(ctx, name)
		if err != nil {
			return err
		}
		keys := []string{s.key("ad", name), s.key("adapters"), s.key("abr", a.Hash), s.key("ab", a.Hash)}
		code, err := deleteAdapterScript.Run(ctx, s.rdb, keys, name, a.Hash).Int64()
		if err != nil {
			return s.fail(ctx, "delete adapter", err)
		}
		s.ok()
		switch code {
		case 0:
			return nil
		case 1:
			return fmt.Errorf("adapter %q: %w", name, tenant.ErrNotFound)
		}
	}
	return fmt.Errorf("redisstore: delete adapter %q: replaced concurrently: %w", name, tenant.ErrUnavailable)
}

// AdapterFiles implements tenant.AdapterStore.
func (s *Store) AdapterFiles(ctx context.Context, hash string) ([]byte, []byte, error) {
	chunks, err := s.rdb.LRange(ctx, s.key("ab", hash), 0, -1).Result()
	if err != nil {
		return nil, nil, s.fail(ctx, "get adapter files", err)
	}
	s.ok()
	if len(chunks) == 0 {
		return nil, nil, fmt.Errorf("adapter files %s: %w", hash, tenant.ErrNotFound)
	}
	var blob []byte
	for _, c := range chunks {
		blob = append(blob, c...)
	}
	if len(blob) < 8 || binary.LittleEndian.Uint64(blob) > uint64(len(blob)-8) {
		return nil, nil, fmt.Errorf("redisstore: adapter files %s: corrupt record of %d bytes", hash, len(blob))
	}
	n := 8 + int(binary.LittleEndian.Uint64(blob))
	return blob[8:n:n], blob[n:], nil
}

// dropTenantAdapters deletes the adapters tenant id owned and withdraws
// its shares of the others, after the tenant itself was deleted (a
// re-created tenant of the same ID inherits nothing).
func (s *Store) dropTenantAdapters(ctx context.Context, id string) error {
	as, err := s.ListAdapters(ctx)
	if err != nil {
		return err
	}
	for _, a := range as {
		switch {
		case a.Owner == id:
			err = s.DeleteAdapter(ctx, a.Name)
		case slices.Contains(a.SharedWith, id):
			a.SharedWith = slices.DeleteFunc(a.SharedWith, func(t string) bool { return t == id })
			_, err = s.UpdateAdapter(ctx, a)
		}
		if err != nil && !errors.Is(err, tenant.ErrNotFound) {
			return fmt.Errorf("redisstore: deleting the adapters of tenant %q: %w", id, err)
		}
	}
	return nil
}
