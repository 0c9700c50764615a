-- release.lua: drop one hold level of a mutex, by its owner only.
-- KEYS[1] lock hash; KEYS[3] waiter queue; KEYS[4] waiter deadlines (KEYS[2] unused)
-- ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] channel to wake the next waiter on
-- reply: -1 not held (expired, taken over or gone); else the hold count left.
-- On the last level it deletes the lock and publishes the longest live waiter's
-- owner id (or "" when none), so only that waiter retries: no thundering herd.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local h = redis.call('HMGET', KEYS[1], 'o', 'c', 'd')
if not h[1] or h[1] ~= ARGV[2] or tonumber(h[3]) <= now then return -1 end
local c = tonumber(h[2])
if c > 1 then
  redis.call('HSET', KEYS[1], 'c', c - 1)
  return c - 1
end
redis.call('DEL', KEYS[1])
local next = ''
local head = redis.call('ZRANGE', KEYS[3], 0, 99)
for _, w in ipairs(head) do
  if tonumber(redis.call('HGET', KEYS[4], w) or '0') > now then
    next = w
    break
  end
  redis.call('ZREM', KEYS[3], w)
  redis.call('HDEL', KEYS[4], w)
end
redis.call('PUBLISH', ARGV[3], next)
return 0
