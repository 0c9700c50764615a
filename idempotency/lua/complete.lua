-- complete.lua: replace a running record by its result, by its owner only, and wake waiters.
-- KEYS[1] record hash (see begin.lua)
-- ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] ttl µs; ARGV[4] value; ARGV[5] failed ('1'/'0');
-- ARGV[6] error text; ARGV[7] wake-up channel
-- reply: 1 stored, or stored already by this owner and still kept (a replay:
-- nothing changed);
-- 0 not held (the lease ended or was taken over): nothing changed.
-- Safe to run twice: the done record keeps its owner, drawn once per Do call,
-- so a second run finds the result this call stored and answers 1 again.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local h = redis.call('HMGET', KEYS[1], 's', 'o', 'd', 'f', 'w')
if h[1] == 'd' and h[2] == ARGV[2] and tonumber(h[3]) > now then return 1 end
if h[1] ~= 'r' or h[2] ~= ARGV[2] or tonumber(h[3]) <= now then return 0 end
local ttl = tonumber(ARGV[3])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'd', 'o', ARGV[2], 'd', string.format('%d', now + ttl), 'f', h[4],
  'v', ARGV[4], 'e', ARGV[5], 'm', ARGV[6])
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + 1000)
if h[5] == '1' then redis.call('PUBLISH', ARGV[7], 'd') end
return 1
