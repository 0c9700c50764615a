-- sem_release.lua: drop one hold level of a Semaphore permit, by its holder
-- only; when the holding ends, wake the waiters the free permits can admit.
-- KEYS as sem_acquire.lua (KEYS[3] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] permits;
-- ARGV[4] channel to wake waiters on; ARGV[5] call id (the same in every
-- resend of this call)
-- reply: -1 not held (expired or gone); else the hold count left.
--
-- Safe to run twice. The release that ends a holding leaves its call id in
-- KEYS[2] 'r' until the next such release or the key's TTL: a resend answers
-- 0 again. With Owner, the call log of a holding (see sem_acquire.lua)
-- records the count each release left, so a resend gets the same answer and
-- releases nothing more.
--
-- The wake-up message 's'..p lets the waiters up to place p retry: with f
-- permits free, the first f live waiters, so that no more wake than can go.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, permits, channel, call = ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local function int(x) return string.format('%d', x) end

-- logged: the value the call log records for call id, or nil.
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

local r = redis.call('HMGET', KEYS[2], 'k' .. owner, 'r')
if r[2] == call then return 0 end
local done = logged(r[1], call)
if done then return done end
if tonumber(redis.call('ZSCORE', KEYS[1], owner) or '0') <= now then return -1 end
local c = redis.call('HINCRBY', KEYS[2], 'c' .. owner, -1)
if c > 0 then
  redis.call('HSET', KEYS[2], 'k' .. owner, record(r[1], call, c))
  return c
end
redis.call('ZREM', KEYS[1], owner)
redis.call('HDEL', KEYS[2], 'c' .. owner, 't' .. owner, 'k' .. owner)
redis.call('HSET', KEYS[2], 'r', call)

local free = permits - redis.call('ZCOUNT', KEYS[1], '(' .. int(now), '+inf')
if free <= 0 then return 0 end
-- Drop dead waiters from the head of the queue, at most 100 per call.
local head = redis.call('ZRANGE', KEYS[4], 0, 99)
for _, w in ipairs(head) do
  if tonumber(redis.call('HGET', KEYS[5], w) or '0') > now then break end
  redis.call('ZREM', KEYS[4], w)
  redis.call('HDEL', KEYS[5], w)
end
local last = redis.call('ZRANGE', KEYS[4], free - 1, free - 1, 'WITHSCORES')
if not last[2] then last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES') end
if last[2] then redis.call('PUBLISH', channel, 's' .. int(tonumber(last[2]))) end
return 0
