-- consume.lua: delete-first consumption of a one-time token, by one call.
-- KEYS[1] token key (see issue.lua); ARGV[1] now µs or ""; ARGV[2] call ID;
-- ARGV[3] replay window µs
-- reply: 1 the token existed and was live, and this call consumed it; 0 otherwise.
-- A live token is consumed by replacing its deadline with
-- 'c<deadline>:<call ID>', where the new deadline is the earlier of the
-- token's and now + the replay window, so that a second run of the same call
-- (a client's resend after a lost reply) answers 1 again while any other call
-- gets 0. The marker is judged by its deadline, as the token is, and lives no
-- longer than the token would have; an expired token is deleted.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local cdl, by = string.match(v, '^c(%d+):(.*)$')
if cdl then
  if tonumber(cdl) > now and by == ARGV[2] then return 1 end
  return 0
end
local deadline = tonumber(v)
if deadline > now then
  deadline = math.min(deadline, now + tonumber(ARGV[3]))
  redis.call('SET', KEYS[1], string.format('c%d:', deadline) .. ARGV[2],
    'PX', math.ceil((deadline - now) / 1000) + 1000)
  return 1
end
redis.call('DEL', KEYS[1])
return 0
