-- issue.lua: store a one-time token.
-- KEYS[1] token key: its deadline µs as a string; ARGV[1] now µs or ""; ARGV[2] ttl µs
-- reply: 1 stored; 0 a live token with this value exists (nothing changed).
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local v = redis.call('GET', KEYS[1])
if v and tonumber(v) > now then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], string.format('%d', now + ttl), 'PX', math.ceil(ttl / 1000) + 1000)
return 1
