"""The Redis store's Lua scripts: every change that touches several keys is one script, so it is
atomic across every gateway sharing the server (`store/redis/store.py` registers and runs them)."""

CREATE_KEY = """
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('duplicate api key id or secret hash')
end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('SET', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
return 1
"""

# A key by its secret's hash in one round trip (the lookup every keyed request makes). KEYS: the
# keyhash key. ARGV: prefix. Returns the key hash's fields, or nothing.
FIND_KEY = """
local id = redis.call('GET', KEYS[1])
if not id then return {} end
return redis.call('HGETALL', ARGV[1] .. 'key:' .. id)
"""

# ARGV: prefix, JSON of the id-or-name, mode ('revoke' | 'count')
SCAN_KEYS = """
local n = 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local k = ARGV[1] .. 'key:' .. id
  local v = redis.call('HMGET', k, 'id', 'name', 'revoked')
  if v[3] == 'false' then
    if ARGV[3] == 'count' then
      n = n + 1
    elseif v[1] == ARGV[2] or v[2] == ARGV[2] then
      redis.call('HSET', k, 'revoked', 'true')
      n = n + 1
    end
  end
end
return n
"""

# Admission (docs/api-operations.md §11; the same arithmetic as store/admit.py, which documents it) on Redis's
# clock. KEYS: the key hash, its reservations hash. ARGV: prefix, generation id, owner, amount, tokens,
# period floor. Returns the decision as JSON.
ADMIT = """
local function num(v) if v == nil or v == false then return nil end local x = cjson.decode(v)
  if x == cjson.null then return nil end return tonumber(x) end
local function lim(t, name) local x = t and t[name] if x == nil or x == cjson.null then return nil end return x end
if redis.call('EXISTS', KEYS[1]) == 0 then return cjson.encode({admitted = false, refusal = 'credits', balance = 0}) end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local v = redis.call('HMGET', KEYS[1], 'credits', 'spent', 'period_start', 'settings', 'rpm_tat', 'tpm_tat')
local credits, spent, period_start = num(v[1]), num(v[2]) or 0, num(v[3]) or 0
local settings = v[4] and cjson.decode(v[4]) or {}
local limits = settings.limits
if limits == cjson.null then limits = nil end
local rpm, tpm, concurrent = lim(limits, 'rpm'), lim(limits, 'tpm'), lim(limits, 'concurrent')
local rpm_tat, tpm_tat = num(v[5]) or 0, num(v[6]) or 0
local live, reserved, alive = 0, 0, {}
local held = redis.call('HGETALL', KEYS[2])
for i = 1, #held, 2 do
  local r = cjson.decode(held[i + 1])
  if alive[r.owner] == nil then alive[r.owner] = redis.call('EXISTS', ARGV[1] .. 'lease:' .. r.owner) == 1 end
  if alive[r.owner] then live = live + 1; reserved = reserved + r.amount else redis.call('HDEL', KEYS[2], held[i]) end
end
local floor = tonumber(ARGV[6])
if floor > period_start then
  spent, period_start = 0, floor
  redis.call('HSET', KEYS[1], 'spent', '0', 'period_start', tostring(floor))
end
local amount, tokens = tonumber(ARGV[4]), tonumber(ARGV[5])
local d = {admitted = false, rates = {}}
if credits then d.balance = credits - spent - reserved end
if concurrent and live >= concurrent then d.refusal = 'concurrent'; d.retry_after = 1; return cjson.encode(d) end
local function gcra(tat, limit, cost)
  local interval = 60 / limit
  local base = math.max(tat, now)
  local new_tat = base + cost * interval
  local ahead = new_tat - now
  if ahead > 60 + 1e-9 then
    local wait = ahead - 60
    if cost > limit then wait = 60 end
    return false, wait, math.max(0, math.floor((60 - (base - now)) / interval + 1e-9)), base - now
  end
  return true, new_tat, math.max(0, math.floor((60 - ahead) / interval + 1e-9)), ahead
end
local new_rpm, new_tpm = rpm_tat, tpm_tat
if rpm then
  local ok, value, remaining, reset = gcra(rpm_tat, rpm, 1)
  d.rates.requests = {rpm, remaining, reset}
  if not ok then d.refusal = 'rpm'; d.retry_after = value; return cjson.encode(d) end
  new_rpm = value
end
if tpm then
  local ok, value, remaining, reset = gcra(tpm_tat, tpm, tokens)
  d.rates.tokens = {tpm, remaining, reset}
  if not ok then d.refusal = 'tpm'; d.retry_after = value; return cjson.encode(d) end
  new_tpm = value
end
if credits and (spent >= credits or spent + reserved + amount > credits + 1e-9) then
  d.refusal = 'credits'; return cjson.encode(d)
end
d.admitted = true
redis.call('HSET', KEYS[1], 'rpm_tat', string.format('%.6f', new_rpm), 'tpm_tat', string.format('%.6f', new_tpm))
redis.call('HSET', KEYS[2], ARGV[2], cjson.encode({owner = ARGV[3], amount = amount, tokens = tokens}))
return cjson.encode(d)
"""

# KEYS: the key hash, its reservations hash. ARGV: generation id, cost, tokens used, period floor.
SETTLE = """
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held then redis.call('HDEL', KEYS[2], ARGV[1]) end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local v = redis.call('HMGET', KEYS[1], 'spent', 'period_start', 'settings', 'tpm_tat', 'credits')
local spent, period_start = tonumber(cjson.decode(v[1] or '0')), tonumber(cjson.decode(v[2] or '0'))
local floor = tonumber(ARGV[4])
if floor > period_start then spent, period_start = 0, floor end
-- store/admit.py `charge`: never past the credits
local total, credits = spent + tonumber(ARGV[2]), v[5] and v[5] ~= 'null' and tonumber(v[5])
if credits and total > credits then spent = math.max(spent, credits) else spent = total end
redis.call('HSET', KEYS[1], 'spent', string.format('%.17g', spent), 'period_start', tostring(period_start))
if held then
  local settings = v[3] and cjson.decode(v[3]) or {}
  local limits = settings.limits
  local tpm = limits and limits ~= cjson.null and limits.tpm
  local reserved = cjson.decode(held).tokens
  if tpm and tpm ~= cjson.null and reserved ~= tonumber(ARGV[3]) then
    local tat = tonumber(cjson.decode(v[4] or '0')) + (tonumber(ARGV[3]) - reserved) * (60 / tpm)
    redis.call('HSET', KEYS[1], 'tpm_tat', string.format('%.6f', tat))
  end
end
return 1
"""

# KEYS: the key hash. ARGV: amount. Unlimited keys (credits null) take no top-up.
TOP_UP = """
local c = redis.call('HGET', KEYS[1], 'credits')
if not c or c == 'null' then return 0 end
redis.call('HSET', KEYS[1], 'credits', string.format('%.17g', tonumber(c) + tonumber(ARGV[1])))
return 1
"""

# KEYS: the key hash. ARGV: field, value pairs (an admin's change; never the counters).
SAVE_KEY = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

# KEYS: gen, owner set of the new owner, tail channel, the console's index of ended records, the
# sessions index of the record's key and of all keys (store/redis/sessions.py).
# ARGV: mode, old-owner-set prefix, in_progress flag, id, created_at, in-a-session flag, fields...
# An update (a generation's outcome) is written only while the record is still in progress: one a
# lease sweep marked `interrupted` keeps that outcome. A record of an agent session is indexed when
# it is created (its session never changes). A record that is not in progress, updated or created
# so (a rejected request's, server/rejections.py), joins the console's index.
PUT_GEN = """
local exists = redis.call('EXISTS', KEYS[1]) == 1
if ARGV[1] == 'create' and exists then return redis.error_reply('duplicate generation id') end
if ARGV[1] == 'update' then
  if not exists or redis.call('HGET', KEYS[1], 'status') ~= '"in_progress"' then return 0 end
end
if exists then
  local old = redis.call('HGET', KEYS[1], 'owner')
  if old then redis.call('SREM', ARGV[2] .. cjson.decode(old), ARGV[4]) end
end
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
if ARGV[3] == '1' then redis.call('SADD', KEYS[2], ARGV[4]) end
if ARGV[1] == 'create' and ARGV[6] == '1' then
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[4])
  redis.call('ZADD', KEYS[6], ARGV[5], ARGV[4])
end
if ARGV[1] == 'update' then redis.call('PUBLISH', KEYS[3], '') end
if ARGV[3] == '0' then redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4]) end
return 1
"""

# KEYS: idem hash, new gen, idem zset, owner set, the sessions indexes (as PUT_GEN's). ARGV: prefix,
# idem member, gen id, request hash (JSON), created_at, ttl ms (0 = none), in_progress flag,
# in-a-session flag, fields...
BEGIN = """
local cur = redis.call('HMGET', KEYS[1], 'gen', 'hash')
if cur[1] then
  local existing = ARGV[1] .. 'gen:' .. cur[1]
  if redis.call('EXISTS', existing) == 1 then
    local status = redis.call('HGET', existing, 'status')
    if cur[2] ~= ARGV[4] then
      return {'mismatch', redis.call('HGETALL', existing)}
    end
    if status == '"in_progress"' or status == '"completed"' then
      return {'existing', redis.call('HGETALL', existing)}
    end
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then return redis.error_reply('duplicate generation id') end
redis.call('HSET', KEYS[1], 'gen', ARGV[3], 'hash', ARGV[4], 'created_at', ARGV[5])
if tonumber(ARGV[6]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[2])
redis.call('HSET', KEYS[2], unpack(ARGV, 9))
if ARGV[7] == '1' then redis.call('SADD', KEYS[4], ARGV[3]) end
if ARGV[8] == '1' then
  redis.call('ZADD', KEYS[5], ARGV[5], ARGV[3])
  redis.call('ZADD', KEYS[6], ARGV[5], ARGV[3])
end
return {'created', {}}
"""

# KEYS: lease key, leases set. ARGV: owner, ttl ms. Returns 1 when the owner held a lease already.
RENEW_LEASE = """
local held = redis.call('SISMEMBER', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return held
"""

# Marks one owner's running generations interrupted and forgets the owner, when it holds no live
# lease. KEYS: leases set. ARGV: prefix, owner, owner (JSON), error (JSON), mode ('swept': only an
# owner in the leases set, whose lease key expired; 'orphan': only an owner never in it).
SWEEP_OWNER = """
local member = redis.call('SISMEMBER', KEYS[1], ARGV[2]) == 1
if ARGV[5] == 'swept' and not member then return 0 end
if ARGV[5] == 'orphan' and member then return 0 end
if redis.call('EXISTS', ARGV[1] .. 'lease:' .. ARGV[2]) == 1 then return 0 end
local owned = ARGV[1] .. 'owner:' .. ARGV[2]
local n = 0
for _, id in ipairs(redis.call('SMEMBERS', owned)) do
  local g = ARGV[1] .. 'gen:' .. id
  local v = redis.call('HMGET', g, 'status', 'owner')
  if v[1] == '"in_progress"' and v[2] == ARGV[3] then
    redis.call('HSET', g, 'status', '"interrupted"', 'finish_reason', '"error"', 'error', ARGV[4])
    redis.call('PUBLISH', ARGV[1] .. 'tail:' .. id, '')
    n = n + 1
  end
end
redis.call('DEL', owned)
redis.call('SREM', KEYS[1], ARGV[2])
return n
"""

# KEYS: logkinds set, logidx zset, gen, tail channel (followers are told). ARGV: prefix .. 'log:' .. id
# .. ':', ttl ms, id, then (kind, first seq, last seq, member)* per run. A run written again from its
# first seq (the retry of a write that failed) replaces what an earlier write left from that seq on.
APPEND_LOG = """
local ttl = tonumber(ARGV[2])
for i = 4, #ARGV, 4 do
  local key = ARGV[1] .. ARGV[i]
  redis.call('ZREMRANGEBYSCORE', key, ARGV[i + 1], '+inf')
  redis.call('ZADD', key, ARGV[i + 2], ARGV[i + 3])
  redis.call('SADD', KEYS[1], ARGV[i])
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
if not redis.call('ZSCORE', KEYS[2], ARGV[3]) then
  local created = redis.call('HGET', KEYS[3], 'created_at')
  if created then redis.call('ZADD', KEYS[2], tonumber(created), ARGV[3]) end
end
redis.call('PUBLISH', KEYS[4], '')
return 1
"""

# KEYS: idem zset. ARGV: prefix .. 'idem:', cutoff, members...
PRUNE_IDEM = """
local n = 0
local cutoff = tonumber(ARGV[2])
for i = 3, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) < cutoff then
    redis.call('DEL', ARGV[1] .. ARGV[i])
    redis.call('ZREM', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
"""

# KEYS: logidx zset. ARGV: prefix, generation ids...
PRUNE_LOGS = """
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', ARGV[1] .. 'gen:' .. id, 'status') ~= '"in_progress"' then
    local kinds = ARGV[1] .. 'logkinds:' .. id
    for _, kind in ipairs(redis.call('SMEMBERS', kinds)) do
      redis.call('DEL', ARGV[1] .. 'log:' .. id .. ':' .. kind)
    end
    redis.call('DEL', kinds)
    redis.call('ZREM', KEYS[1], id)
  end
end
return 1
"""
