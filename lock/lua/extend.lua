-- extend.lua: move the deadline of a held mutex, by its owner only; never acquires.
-- KEYS[1] lock hash; ARGV[1] now µs or ""; ARGV[2] owner; ARGV[3] ttl µs
-- reply: 1 extended, -1 not held.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local h = redis.call('HMGET', KEYS[1], 'o', 'd')
if not h[1] or h[1] ~= ARGV[2] or tonumber(h[2]) <= now then return -1 end
local ttl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'd', string.format('%d', now + ttl))
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000))
return 1
