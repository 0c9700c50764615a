-- consume.lua: delete-first consumption of a one-time token.
-- KEYS[1] token key (see issue.lua); ARGV[1] now µs or ""
-- reply: 1 the token existed and was live (it is now gone); 0 otherwise.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
redis.call('DEL', KEYS[1])
if tonumber(v) > now then return 1 end
return 0
