package storedresp

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Backend on Redis (a server or a Cluster), shared by every
// gateway replica. Tenant t's keys all carry the hash tag {t}:
//
//	<prefix>resp:{t}:<id>  the sealed record, expiring after the TTL
//	<prefix>respidx:{t}    sorted set of t's ids by insertion sequence
//	<prefix>respsz:{t}     hash id → record size
//	<prefix>respbytes:{t}  t's byte count
//
// The index, sizes and count are refreshed to the TTL on every Put, so a
// tenant that stops storing leaves nothing behind. A record that expired
// still counts toward the bound until Put evicts it as one of the oldest.
type Redis struct {
	rdb    redis.UniversalClient
	prefix string
}

var _ Backend = (*Redis)(nil)

// NewRedis returns a Backend on rdb with keys under prefix.
func NewRedis(rdb redis.UniversalClient, prefix string) *Redis {
	return &Redis{rdb: rdb, prefix: prefix}
}

func (r *Redis) keys(tenant string) (idx, sizes, count string) {
	tag := "{" + tenant + "}"
	return r.prefix + "respidx:" + tag, r.prefix + "respsz:" + tag, r.prefix + "respbytes:" + tag
}

func (r *Redis) recordKey(tenant, id string) string {
	return r.prefix + "resp:{" + tenant + "}:" + id
}

// putScript stores the record and evicts the tenant's oldest until the
// bound holds. KEYS: record, index, sizes, count. ARGV: id, blob, ttl ms,
// max bytes, record key prefix.
var putScript = redis.NewScript(`
local old = redis.call('HGET', KEYS[3], ARGV[1])
if old then
  redis.call('DECRBY', KEYS[4], old)
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
local seq = redis.call('INCR', KEYS[4] .. ':seq')
redis.call('ZADD', KEYS[2], seq, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], string.len(ARGV[2]))
local total = redis.call('INCRBY', KEYS[4], string.len(ARGV[2]))
while total > tonumber(ARGV[4]) do
  local oldest = redis.call('ZPOPMIN', KEYS[2])
  if #oldest == 0 then break end
  local id = oldest[1]
  local size = redis.call('HGET', KEYS[3], id)
  redis.call('HDEL', KEYS[3], id)
  redis.call('DEL', ARGV[5] .. id)
  if size then total = redis.call('DECRBY', KEYS[4], size) end
end
for _, k in ipairs({KEYS[2], KEYS[3], KEYS[4], KEYS[4] .. ':seq'}) do
  redis.call('PEXPIRE', k, ARGV[3])
end
return total
`)

// deleteScript removes one record and its accounting. KEYS: record,
// index, sizes, count. ARGV: id. Returns 0 when there was no record.
var deleteScript = redis.NewScript(`
local size = redis.call('HGET', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if size then redis.call('DECRBY', KEYS[4], size) end
return redis.call('DEL', KEYS[1])
`)

// deleteTenantScript removes every record of a tenant and its
// accounting. KEYS: index, sizes, count. ARGV: record key prefix.
var deleteTenantScript = redis.NewScript(`
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  redis.call('DEL', ARGV[1] .. id)
end
return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[3] .. ':seq')
`)

// DeleteTenant implements Backend.
func (r *Redis) DeleteTenant(ctx context.Context, tenant string) error {
	idx, sizes, count := r.keys(tenant)
	return deleteTenantScript.Run(ctx, r.rdb, []string{idx, sizes, count}, r.recordKey(tenant, "")).Err()
}

// Put implements Backend.
func (r *Redis) Put(ctx context.Context, tenant, id string, blob []byte, ttl time.Duration, maxBytes int64) error {
	idx, sizes, count := r.keys(tenant)
	return putScript.Run(ctx, r.rdb, []string{r.recordKey(tenant, id), idx, sizes, count},
		id, blob, ttl.Milliseconds(), maxBytes, r.recordKey(tenant, "")).Err()
}

// Get implements Backend.
func (r *Redis) Get(ctx context.Context, tenant, id string) ([]byte, error) {
	b, err := r.rdb.Get(ctx, r.recordKey(tenant, id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return b, err
}

// Delete implements Backend.
func (r *Redis) Delete(ctx context.Context, tenant, id string) error {
	idx, sizes, count := r.keys(tenant)
	n, err := deleteScript.Run(ctx, r.rdb, []string{r.recordKey(tenant, id), idx, sizes, count}, id).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
