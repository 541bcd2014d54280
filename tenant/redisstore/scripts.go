package redisstore

import "github.com/redis/go-redis/v9"

// Times inside the scripts are Unix microseconds (exact in Lua's doubles
// until the year 2255). Every script takes its clock as ARGV[1]: a number
// from the store's injected clock, or "" for the Redis server's TIME, which
// gives all replicas one clock.
//
// The arithmetic mirrors memstore operation for operation (same expression
// order, so the same float64 results); storetest checks they agree.
const prelude = `
if redis.replicate_commands then redis.replicate_commands() end
local P = 60000000
local DAY = 86400000000
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function num(x) return string.format('%.17g', x) end
local function int(x) return string.format('%.0f', x) end
-- content of a token bucket refilled at limit per minute; unset = full
local function level(lvl, ts, now, limit)
  if not lvl or not ts then return limit end
  local el = now - ts
  if el < 0 then el = 0 end
  local l = lvl + el * limit / P
  if l > limit then l = limit end
  return l
end
local function rem(lvl)
  local r = math.floor(lvl)
  if r < 0 then r = 0 end
  return r
end
local function ceilms(us)
  if us <= 0 then return 0 end
  return math.ceil(us / 1000)
end
-- proleptic Gregorian calendar <-> days since 1970-01-01
local function civil(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, d
end
local function days(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = m > 2 and m - 3 or m + 9
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end
-- budget period containing t: identifier and end
local function period(kind, len, t)
  if kind == 'day' then
    local n = math.floor(t / DAY)
    return 'd:' .. int(n), (n + 1) * DAY
  elseif kind == 'dur' then
    local n = math.floor(t / len)
    return 'p' .. int(len) .. ':' .. int(n), (n + 1) * len
  end
  local y, m = civil(math.floor(t / DAY))
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  return 'm:' .. int(y * 12 + m - 1), days(ny, nm, 1) * DAY
end
`

// Acquire reply: {status, kind, limit, remaining, reset_ms, retry_ms,
// unsatisfiable, limit_req, rem_req, reset_req_ms, limit_tok, rem_tok,
// reset_tok_ms, now_us, expires_us, held_tokens}.
const (
	acqOK = iota
	acqNoTenant
	acqDisabled
	acqDenied
)

// Denial kinds in the acquire reply, see limitKinds.
const (
	kindModel = iota + 1
	kindPriority
	kindTokens
	kindBudget
	kindRequests
	kindConcurrency
)

// acquireSrc admits one request: it reads the tenant record and model
// limits, checks everything, and commits the request bucket, token bucket,
// budget and concurrency slot only if every check passes.
//
// KEYS: tenant record, model limits, rate state, budget state, leases.
// ARGV: clock, tenant ID, model, tokens, priority, lease ID, lease TTL (us),
// concurrency retry-after (ms), min tokens (flexible request when above 0
// and below tokens: hold what the rate and budget have left, at least min).
const acquireSrc = prelude + `
local now = clock(ARGV[1])
local raw = redis.call('GET', KEYS[1])
if not raw then return {1} end
local t = cjson.decode(raw)
if t.disabled then return {2} end
local tid, model, cost, prio = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local function allows(list, v)
  if type(list) ~= 'table' or #list == 0 then return true end
  for _, x in ipairs(list) do
    if x == v then return true end
  end
  return false
end
local ml = redis.call('GET', KEYS[2])
if not allows(t.models, model) or (ml and not allows(cjson.decode(ml).allowed_tenants, tid)) then
  return {3, 1, 0, 0, 0, 0, 0}
end
-- max_priority 0 (the default) allows priority 0 only, unlike the other limits
local maxprio = tonumber(t.max_priority) or 0
if prio > maxprio then
  return {3, 2, maxprio, 0, 0, 0, 0}
end

local rpm, tpm = t.rpm, t.tpm
local st = redis.call('HMGET', KEYS[3], 'rl', 'rt', 'tl', 'tt')
local rts, tts = tonumber(st[2]), tonumber(st[4])
local rq = level(tonumber(st[1]), rts, now, rpm)
local tk = level(tonumber(st[3]), tts, now, tpm)
local q = {rpm, 0, 0, tpm, 0, 0}
local function quota()
  if rpm > 0 then q[2], q[3] = rem(rq), ceilms((rpm - rq) * P / rpm) end
  if tpm > 0 then q[5], q[6] = rem(tk), ceilms((tpm - tk) * P / tpm) end
end
quota()
local function deny(kind, limit, remaining, reset, retry, unsat)
  return {3, kind, limit, remaining, reset, retry, unsat, q[1], q[2], q[3], q[4], q[5], q[6]}
end

local pid, pend = period(t.pkind, t.plen, now)
local b = redis.call('HMGET', KEYS[4], 'p', 'u')
local used = 0
if b[1] == pid then used = tonumber(b[2]) end
local left = t.budget - used
if left < 0 then left = 0 end
local until_end = ceilms(pend - now)
local minc = tonumber(ARGV[9])
if minc > 0 and minc < cost then
  if tpm > 0 and rem(tk) < cost then cost = rem(tk) end
  if t.budget > 0 and t.budget - used < cost then cost = t.budget - used end
  if cost < minc then cost = minc end
end
if tpm > 0 and cost > tpm then return deny(3, tpm, q[5], q[6], 0, 1) end
if t.budget > 0 and cost > t.budget then return deny(4, t.budget, left, until_end, 0, 1) end
if t.budget > 0 and used + cost > t.budget then return deny(4, t.budget, left, until_end, until_end, 0) end
if rpm > 0 and rq < 1 then return deny(5, rpm, q[2], q[3], ceilms((1 - rq) * P / rpm), 0) end
if tpm > 0 and tk < cost then return deny(3, tpm, q[5], q[6], ceilms((cost - tk) * P / tpm), 0) end
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', int(now))
if t.conc > 0 and redis.call('ZCARD', KEYS[5]) >= t.conc then
  return deny(6, t.conc, 0, 0, tonumber(ARGV[8]), 0)
end

local full = 0
if rpm > 0 then
  rq = rq - 1
  local ts = now
  if rts and rts > now then ts = rts end
  redis.call('HSET', KEYS[3], 'rl', num(rq), 'rt', int(ts))
  full = (rpm - rq) * P / rpm
end
if tpm > 0 then
  tk = tk - cost
  local ts = now
  if tts and tts > now then ts = tts end
  redis.call('HSET', KEYS[3], 'tl', num(tk), 'tt', int(ts))
  local f = (tpm - tk) * P / tpm
  if f > full then full = f end
end
if rpm > 0 or tpm > 0 then
  -- the state is worthless once both buckets are full again
  redis.call('PEXPIRE', KEYS[3], ceilms(full) + 60000)
end
quota()
redis.call('HSET', KEYS[4], 'p', pid, 'u', int(used + cost))
redis.call('PEXPIRE', KEYS[4], ceilms(pend - now) + 86400000)
local ttl = tonumber(ARGV[7])
redis.call('ZADD', KEYS[5], int(now + ttl), ARGV[6])
redis.call('PEXPIRE', KEYS[5], ceilms(ttl) + 60000)
return {0, 0, 0, 0, 0, 0, 0, q[1], q[2], q[3], q[4], q[5], q[6], now, now + ttl, cost}
`

// releaseSrc frees a lease's slot, reconciles its held tokens with the
// actual count in the token bucket and the budget (if still in the period
// of admission), and records usage for the current UTC day.
//
// With ARGV[12] = '1' it voids a lease whose acquire lost its reply: if
// the acquire did take the slot it is freed and the held tokens refunded
// (billed 0), and no usage is recorded (the request was admitted by other
// means and records its own); if it did not, nothing changes.
//
// KEYS: tenant record, rate state, budget state, leases.
// ARGV: clock, lease ID, held tokens, acquired (us), prompt tokens,
// completion tokens, model, usage key prefix, usage retention (ms), cached
// prompt tokens, billed tokens (tenant.Consumed.Billed: what the token
// bucket and the budget are charged), void ("1" to void, else empty).
const releaseSrc = prelude + `
local now = clock(ARGV[1])
local void = ARGV[12] == '1'
if redis.call('ZREM', KEYS[4], ARGV[2]) == 0 and void then return -1 end
local delta = tonumber(ARGV[11]) - tonumber(ARGV[3])
local raw = redis.call('GET', KEYS[1])
if raw and delta ~= 0 then
  local t = cjson.decode(raw)
  local tpm = t.tpm
  if tpm > 0 then
    local st = redis.call('HMGET', KEYS[2], 'tl', 'tt')
    local ts = tonumber(st[2])
    local tk = level(tonumber(st[1]), ts, now, tpm) - delta
    if tk > tpm then tk = tpm end
    if not ts or ts < now then ts = now end
    redis.call('HSET', KEYS[2], 'tl', num(tk), 'tt', int(ts))
    local ttl = ceilms((tpm - tk) * P / tpm) + 60000
    if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
  end
  local pid = period(t.pkind, t.plen, tonumber(ARGV[4]))
  local b = redis.call('HMGET', KEYS[3], 'p', 'u')
  if b[1] == pid then
    local u = tonumber(b[2]) + delta
    if u < 0 then u = 0 end
    redis.call('HSET', KEYS[3], 'u', int(u))
  end
end
if void then return now end
local y, m, d = civil(math.floor(now / DAY))
local key = ARGV[8] .. string.format('%04d-%02d-%02d', y, m, d)
redis.call('HINCRBY', key, 'r:' .. ARGV[7], 1)
redis.call('HINCRBY', key, 'p:' .. ARGV[7], ARGV[5])
redis.call('HINCRBY', key, 'c:' .. ARGV[7], ARGV[6])
redis.call('HINCRBY', key, 'k:' .. ARGV[7], ARGV[10])
redis.call('HINCRBY', key, 'b:' .. ARGV[7], ARGV[11])
redis.call('PEXPIRE', key, ARGV[9])
return now
`

// renewSrc extends a live lease. KEYS: leases. ARGV: clock, lease ID,
// lease TTL (us). Returns the new expiry, or -1 if the lease was reclaimed.
const renewSrc = prelude + `
local now = clock(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(now))
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return -1 end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], 'XX', int(now + ttl), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ceilms(ttl) + 60000)
return now + ttl
`

// shareInFlightSrc replaces one replica's report of its requests in flight
// per tenant and returns the fleet's sums over the replicas whose report has
// not expired on the script's clock. Expired replicas are forgotten here;
// the keys' own expiry only collects what a vanished fleet leaves behind.
//
// KEYS: replicas (sorted set of replica by report expiry), the replica's
// report (hash tenant -> count). ARGV: clock, replica, TTL (us), report key
// prefix, then tenant, count pairs (counts above 0). Returns tenant, count
// pairs.
const shareInFlightSrc = prelude + `
local now = clock(ARGV[1])
local ttl = tonumber(ARGV[3])
local keep = ceilms(ttl) + 60000
redis.call('DEL', KEYS[2])
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[2], keep)
for _, r in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now))) do
  redis.call('DEL', ARGV[4] .. r)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(now))
redis.call('ZADD', KEYS[1], int(now + ttl), ARGV[2])
if redis.call('PTTL', KEYS[1]) < keep then redis.call('PEXPIRE', KEYS[1], keep) end
local sums, order = {}, {}
for _, r in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local h = redis.call('HGETALL', ARGV[4] .. r)
  for i = 1, #h, 2 do
    if not sums[h[i]] then order[#order + 1] = h[i] end
    sums[h[i]] = (sums[h[i]] or 0) + tonumber(h[i + 1])
  end
end
local out = {}
for _, id in ipairs(order) do
  out[#out + 1] = id
  out[#out + 1] = int(sums[id])
end
return out
`

// authSrc fetches a key record and its tenant in one round trip.
// KEYS: key record. ARGV: tenant record key prefix. Returns {tenant ID,
// hash, revoked, tenant record} or nil.
const authSrc = `
local k = redis.call('HMGET', KEYS[1], 'tenant', 'hash', 'revoked')
if not k[1] then return false end
return {k[1], k[2] or '', k[3] or '', redis.call('GET', ARGV[1] .. k[1]) or ''}
`

// createTenantScript: KEYS: tenant record, tenant set. ARGV: record, ID.
// Returns 0, or 1 if the tenant exists.
const createTenantSrc = `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX') then return 1 end
redis.call('SADD', KEYS[2], ARGV[2])
return 0
`

// deleteTenantSrc removes a tenant and its limiter state and revokes its
// keys. KEYS: tenant record, tenant set, tenant's key set, rate state,
// budget state, leases. ARGV: ID, key record prefix, revocation time.
// Returns 0, or 1 if there is no such tenant.
const deleteTenantSrc = `
if redis.call('DEL', KEYS[1]) == 0 then return 1 end
redis.call('SREM', KEYS[2], ARGV[1])
for _, id in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  redis.call('HSETNX', ARGV[2] .. id, 'revoked', ARGV[3])
end
redis.call('DEL', KEYS[4], KEYS[5], KEYS[6])
return 0
`

// issueKeySrc stores a key record if its tenant exists and the key ID is
// free. KEYS: tenant record, key record, tenant's key set, key set. ARGV:
// key ID, tenant ID, hash, prefix, name, created. Returns 0, 1 (no tenant)
// or 2 (ID taken).
const issueKeySrc = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 2 end
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'tenant', ARGV[2], 'hash', ARGV[3], 'prefix', ARGV[4], 'name', ARGV[5], 'created', ARGV[6])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
return 0
`

// revokeKeyScript: KEYS: key record. ARGV: revocation time. Keeps an
// earlier revocation time. Returns 0, or 1 if there is no such key.
const revokeKeySrc = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end
redis.call('HSETNX', KEYS[1], 'revoked', ARGV[1])
return 0
`

// deleteModelScript: KEYS: model limits, model set. ARGV: model. Returns 0,
// or 1 if there were no limits.
const deleteModelSrc = `
if redis.call('DEL', KEYS[1]) == 0 then return 1 end
redis.call('SREM', KEYS[2], ARGV[1])
return 0
`

// scripts holds the loaded scripts of one Store.
type scripts struct {
	acquire, release, renew, auth                   *redis.Script
	createTenant, deleteTenant, issueKey, revokeKey *redis.Script
	deleteModel, shareInFlight                      *redis.Script
}

func newScripts() scripts {
	return scripts{
		acquire:       redis.NewScript(acquireSrc),
		release:       redis.NewScript(releaseSrc),
		renew:         redis.NewScript(renewSrc),
		auth:          redis.NewScript(authSrc),
		createTenant:  redis.NewScript(createTenantSrc),
		deleteTenant:  redis.NewScript(deleteTenantSrc),
		issueKey:      redis.NewScript(issueKeySrc),
		revokeKey:     redis.NewScript(revokeKeySrc),
		deleteModel:   redis.NewScript(deleteModelSrc),
		shareInFlight: redis.NewScript(shareInFlightSrc),
	}
}
