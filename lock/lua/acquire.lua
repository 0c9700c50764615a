-- acquire.lua: one attempt to take a mutex.
-- KEYS[1] lock hash {o owner, c hold count, t token, d deadline µs, k call log
--         (with Owner), r the call that last ended a holding}
-- KEYS[2] fence: the last token handed out (no TTL: it outlives the lock)
-- KEYS[3] waiter queue (zset: owner scored by arrival µs)
-- KEYS[4] waiter deadlines (hash: owner -> µs; a waiter that stops retrying drops out)
-- KEYS[5] this call's tombstone (set by cancel.lua when the caller gave up)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] ttl µs; ARGV[4] fair (1/0);
-- ARGV[5] waiting (1: join or stay in the queue on failure); ARGV[6] waiter lease µs;
-- ARGV[7] call id (the same in every resend of this call); ARGV[8] reentrant (1/0:
-- the owner was given with Owner)
-- reply: {1, token} acquired; {0, wait_hint_us} not acquired (0: free but not
-- this waiter's turn; -1: refused, the caller gave up on this call).
--
-- Safe to run twice. Without Owner the owner id is this Lock call's own, so
-- a live holding by owner can only come from an earlier run of this call: it
-- gets the same token, and no hold level is added. With Owner, the call log k
-- (";id=value" entries, the last 8 calls that changed the lock, kept across
-- that owner's holdings) records the token each acquiring call got: a resend
-- of a logged call whose holding is live gets the same token and adds no
-- level. A tombstone means cancel.lua already ran for this call: refused,
-- nothing changes (no token is burnt).
if redis.call('EXISTS', KEYS[5]) == 1 then return {0, -1} end
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, ttl, call = ARGV[2], tonumber(ARGV[3]), ARGV[7]

-- logged: the value the log records for call id, or nil.
local function logged(log, id)
  if not log then return nil end
  local _, e = string.find(log, ';' .. id .. '=', 1, true)
  if not e then return nil end
  return tonumber(string.match(log, '^-?%d+', e + 1))
end
-- record: the log with ";id=v" appended, keeping the last 8 entries.
local function record(log, id, v)
  log = (log or '') .. ';' .. id .. '=' .. string.format('%d', v)
  local _, n = string.gsub(log, ';', '')
  if n > 8 then log = string.sub(log, (string.find(log, ';', 2, true))) end
  return log
end

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

local h = redis.call('HMGET', KEYS[1], 'o', 'c', 't', 'd', 'k')
if h[1] and tonumber(h[4]) > now then
  if h[1] == owner then
    local token = tonumber(h[3])
    if ARGV[8] ~= '1' or logged(h[5], call) == token then
      return {1, token} -- a resend of the call that got this holding or level
    end
    redis.call('HINCRBY', KEYS[1], 'c', 1)
    redis.call('HSET', KEYS[1], 'k', record(h[5], call, token))
    return {1, token}
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
local log = ''
if ARGV[8] == '1' then log = record(h[5], call, token) end
redis.call('HSET', KEYS[1], 'o', owner, 'c', 1, 't', string.format('%d', token), 'd', string.format('%d', now + ttl),
  'k', log)
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000))
redis.call('ZREM', KEYS[3], owner)
redis.call('HDEL', KEYS[4], owner)
return {1, token}
