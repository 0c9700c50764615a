-- abort.lua: remove a running record, by its owner only, so that the key can be retried; wake waiters.
-- KEYS[1] record hash (see begin.lua); ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] wake-up channel
-- reply: 1 removed; 0 not held: nothing changed.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local h = redis.call('HMGET', KEYS[1], 's', 'o', 'd', 'w')
if h[1] ~= 'r' or h[2] ~= ARGV[2] or tonumber(h[3]) <= now then return 0 end
redis.call('DEL', KEYS[1])
if h[4] == '1' then redis.call('PUBLISH', ARGV[3], 'a') end
return 1
