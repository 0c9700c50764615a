-- abort.lua: free a running record, by its owner only, so that the key can be retried; wake waiters.
-- The record is not deleted but marked aborted ('a'), keeping its owner, its
-- lease deadline and its expiry, so that a second run can tell; begin treats
-- it as free.
-- KEYS[1] record hash (see begin.lua); ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] wake-up channel
-- reply: 1 freed, now or (until the lease deadline) by an earlier run of this
-- call; 0 not held: nothing changed.
-- Safe to run twice: owner is drawn once per Do call, so a second run finds the
-- record this call aborted and answers 1 again.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local h = redis.call('HMGET', KEYS[1], 's', 'o', 'd', 'w')
if h[1] == 'a' and h[2] == ARGV[2] and tonumber(h[3]) > now then return 1 end
if h[1] ~= 'r' or h[2] ~= ARGV[2] or tonumber(h[3]) <= now then return 0 end
redis.call('HSET', KEYS[1], 's', 'a')
redis.call('HDEL', KEYS[1], 'w')
if h[4] == '1' then redis.call('PUBLISH', ARGV[3], 'a') end
return 1
