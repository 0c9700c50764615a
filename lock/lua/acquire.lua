-- acquire.lua: one attempt to take a mutex.
-- KEYS[1] lock hash {o owner, c hold count, t token, d deadline µs}
-- KEYS[2] fence: the last token handed out (no TTL: it outlives the lock)
-- KEYS[3] waiter queue (zset: owner scored by arrival µs)
-- KEYS[4] waiter deadlines (hash: owner -> µs; a waiter that stops retrying drops out)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] ttl µs; ARGV[4] fair (1/0);
-- ARGV[5] waiting (1: join or stay in the queue on failure); ARGV[6] waiter lease µs
-- reply: {1, token} acquired; {0, wait_hint_us} not acquired (0: free but not
-- this waiter's turn).
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, ttl = ARGV[2], tonumber(ARGV[3])

-- Drop waiters that stopped retrying, from the head, at most 100 per call.
local function purge()
  local head = redis.call('ZRANGE', KEYS[3], 0, 99)
  for _, w in ipairs(head) do
    local d = tonumber(redis.call('HGET', KEYS[4], w) or '0')
    if d > now then return w end
    redis.call('ZREM', KEYS[3], w)
    redis.call('HDEL', KEYS[4], w)
  end
  return nil
end

local function enqueue()
  if ARGV[5] == '1' then
    redis.call('ZADD', KEYS[3], 'NX', string.format('%d', now), owner)
    redis.call('HSET', KEYS[4], owner, string.format('%d', now + tonumber(ARGV[6])))
    redis.call('PEXPIRE', KEYS[3], math.ceil(tonumber(ARGV[6]) / 1000) + 1000)
    redis.call('PEXPIRE', KEYS[4], math.ceil(tonumber(ARGV[6]) / 1000) + 1000)
  end
end

local h = redis.call('HMGET', KEYS[1], 'o', 'c', 't', 'd')
if h[1] and tonumber(h[4]) > now then
  if h[1] == owner then
    redis.call('HINCRBY', KEYS[1], 'c', 1)
    return {1, tonumber(h[3])}
  end
  enqueue()
  return {0, tonumber(h[4]) - now}
end
local head = purge()
if ARGV[4] == '1' and head and head ~= owner then
  enqueue()
  return {0, 0}
end
-- Tokens follow the server clock when they can: after Redis lost the fence,
-- the new token (now) is still above every token handed out before, as long
-- as fewer than one lock per microsecond was taken on average.
local token = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
if token < now then token = now end
redis.call('SET', KEYS[2], string.format('%d', token))
redis.call('HSET', KEYS[1], 'o', owner, 'c', 1, 't', string.format('%d', token), 'd', string.format('%d', now + ttl))
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000))
redis.call('ZREM', KEYS[3], owner)
redis.call('HDEL', KEYS[4], owner)
return {1, token}
