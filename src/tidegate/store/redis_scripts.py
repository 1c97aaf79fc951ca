"""The Redis store's Lua scripts: every change that touches several keys is one script, so it is
atomic across every gateway sharing the server (`store/redis.py` registers and runs them)."""

CREATE_KEY = """
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('duplicate api key id or secret hash')
end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('SET', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
return 1
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

ADD_SPEND = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HINCRBYFLOAT', KEYS[1], 'spent', ARGV[1]) end
return 1
"""

# KEYS: gen, owner set of the new owner, tail channel. ARGV: mode, old-owner-set prefix, in_progress flag, id, fields...
# An update (a generation's outcome) is written only while the record is still in progress: one a
# lease sweep marked `interrupted` keeps that outcome.
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
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
if ARGV[3] == '1' then redis.call('SADD', KEYS[2], ARGV[4]) end
if ARGV[1] == 'update' then redis.call('PUBLISH', KEYS[3], '') end
return 1
"""

# KEYS: idem hash, new gen, idem zset, owner set. ARGV: prefix, idem member, gen id, request hash (JSON),
# created_at, ttl ms (0 = none), in_progress flag, fields...
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
redis.call('HSET', KEYS[2], unpack(ARGV, 8))
if ARGV[7] == '1' then redis.call('SADD', KEYS[4], ARGV[3]) end
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
