-- one_fixed.lua: the fast path of a Limiter with a single FixedWindow rule:
-- fixed.lua's logic, inlined. allow.lua handles several rules.
-- KEYS[1] state key, holding "<window id>:<count>" (see fixed.lua: the state
-- is in the declared key, so it migrates with its slot); ARGV[1] now µs or ""
-- for TIME; ARGV[2] n; ARGV[3] mode (0 allow, 1 reset); ARGV[4] limit;
-- ARGV[5] window_us
-- reply: {allowed (1/0), status, remaining, retry_us, reset_us, 0}
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
local n, limit, window = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- floor(now / window), exact for integers below 2^53
local wid = math.floor(now / window)
local r = now - wid * window
if r < 0 then wid = wid - 1 elseif r >= window then wid = wid + 1 end
local key, ws = KEYS[1], string.format('%d', wid)
if ARGV[3] == '1' then
  redis.call('DEL', key)
  return {1}
end
local c = 0
local v = redis.call('GET', key)
if v then
  local w, cnt = string.match(v, '^(%-?%d+):(%d+)$')
  if w == ws then c = tonumber(cnt) end
end
local left = (wid + 1) * window - now
local reset = 0
if c > 0 then reset = left end
if n > limit then return {0, -1, limit - c, -1, reset, 0} end
if c + n > limit then return {0, 0, limit - c, left, reset, 0} end
if n > 0 then
  local ms = math.ceil(left / 1000)
  redis.call('SET', key, ws .. ':' .. string.format('%d', c + n), 'PX', ms)
  reset = left
end
return {1, 1, limit - c - n, 0, reset, 0}
