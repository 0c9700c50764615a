-- sem_release.lua: drop one hold level of a Semaphore permit, by its holder
-- only; when the holding ends, wake the waiters the free permits can admit.
-- KEYS as sem_acquire.lua (KEYS[3] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] permits;
-- ARGV[4] channel to wake waiters on
-- reply: -1 not held (expired or gone); else the hold count left.
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
local owner, permits, channel = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local function int(x) return string.format('%d', x) end

if tonumber(redis.call('ZSCORE', KEYS[1], owner) or '0') <= now then return -1 end
local c = redis.call('HINCRBY', KEYS[2], 'c' .. owner, -1)
if c > 0 then return c end
redis.call('ZREM', KEYS[1], owner)
redis.call('HDEL', KEYS[2], 'c' .. owner, 't' .. owner)

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
