-- renew.lua: move the end of a running record's lease, by its owner only; never claims.
-- KEYS[1] record hash (see begin.lua); ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] lease µs
-- reply: 1 renewed; 0 not held (done, taken over, expired or gone).
-- Safe to run twice: a second run moves the deadline again, from its own now,
-- and answers as the first (the runner counts its lease from before the first).
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local h = redis.call('HMGET', KEYS[1], 's', 'o', 'd')
if h[1] ~= 'r' or h[2] ~= ARGV[2] or tonumber(h[3]) <= now then return 0 end
local lease = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'd', string.format('%d', now + lease))
redis.call('PEXPIRE', KEYS[1], math.ceil(lease / 1000) + 1000)
return 1
