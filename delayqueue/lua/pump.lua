-- pump.lua: move due jobs from scheduled to ready, and take back jobs whose
-- lease ended (a consumer crashed or stalled), at most ARGV[2] of each per call
-- (asynq's forwarder cap). A taken-back job goes to ready, due at its lease
-- deadline, or to dead when it has used its attempts.
-- KEYS[1] scheduled (zset: id -> due µs); KEYS[2] ready (zset: id -> due µs);
-- KEYS[3] inflight (zset: id -> lease deadline µs); KEYS[4] dead (zset: id -> µs of death);
-- KEYS[5] meta (hash: id -> "attempt:due_us")
-- ARGV[1] now µs or "" for TIME; ARGV[2] batch size; ARGV[3] max attempts
-- reply: {moved, requeued, dead, ready, next_due_us, next_deadline_us, now_us}
-- next_due_us / next_deadline_us: the head of scheduled / inflight, -1 when empty.
local now = clock(ARGV[1])
local snow = string.format('%d', now)
local batch = tonumber(ARGV[2])
local maxAttempts = tonumber(ARGV[3])

-- Scores come back as strings that Redis formats exactly (%.17g), so they
-- are passed on unchanged.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', snow, 'WITHSCORES', 'LIMIT', 0, batch)
local moved = {}
for i = 1, #due, 2 do
  redis.call('ZADD', KEYS[2], due[i + 1], due[i])
  moved[#moved + 1] = due[i]
end
if #moved > 0 then redis.call('ZREM', KEYS[1], unpack(moved)) end

local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', snow, 'WITHSCORES', 'LIMIT', 0, batch)
local back, requeued, dead = {}, 0, 0
for i = 1, #expired, 2 do
  local id, deadline = expired[i], expired[i + 1]
  local attempt = tonumber(string.match(redis.call('HGET', KEYS[5], id) or '0:0', '^(%d+):')) or 0
  if attempt >= maxAttempts then
    redis.call('ZADD', KEYS[4], snow, id)
    dead = dead + 1
  else
    redis.call('ZADD', KEYS[2], deadline, id)
    redis.call('HSET', KEYS[5], id, string.format('%d:', attempt) .. deadline)
    requeued = requeued + 1
  end
  back[#back + 1] = id
end
if #back > 0 then redis.call('ZREM', KEYS[3], unpack(back)) end

local function head(key)
  local h = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if h[2] then return tonumber(h[2]) end
  return -1
end
return {#moved, requeued, dead, redis.call('ZCARD', KEYS[2]), head(KEYS[1]), head(KEYS[3]), now}
