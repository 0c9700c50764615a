-- issue.lua: store a one-time token.
-- KEYS[1] token key: its deadline µs as a string, or 'c<deadline>:<call ID>'
--   once consumed (see consume.lua); ARGV[1] now µs or ""; ARGV[2] ttl µs
-- reply: 1 stored; 2 a live token with this value exists already; 0 the token
--   was consumed (nothing changed).
-- Safe to run twice: a token is 128 random bits drawn for one IssueToken call,
-- so a live token with this value is this call's (a replay), and 2 means success.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local v = redis.call('GET', KEYS[1])
if v then
  local cdl = string.match(v, '^c(%d+):')
  if cdl and tonumber(cdl) > now then return 0 end
  if not cdl and tonumber(v) > now then return 2 end
end
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], string.format('%d', now + ttl), 'PX', math.ceil(ttl / 1000) + 1000)
return 1
