-- sem_leave.lua: a waiter of a Semaphore gives up (its context ended). It
-- leaves the queue and, as sem_release.lua does, wakes the waiters that free
-- permits can admit: a wake-up this waiter may have consumed goes on.
-- KEYS as sem_acquire.lua (KEYS[2], KEYS[3] unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] owner; ARGV[3] permits;
-- ARGV[4] channel to wake waiters on
-- reply: 0.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, permits, channel = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local function int(x) return string.format('%d', x) end

redis.call('ZREM', KEYS[4], owner)
redis.call('HDEL', KEYS[5], owner)
local free = permits - redis.call('ZCOUNT', KEYS[1], '(' .. int(now), '+inf')
if free <= 0 then return 0 end
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
