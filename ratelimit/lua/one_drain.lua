-- one_drain.lua: the fast path of a Limiter with a single drain rule
-- (TokenBucket, LeakyBucket or GCRA): drain.lua's arithmetic, inlined, with
-- no rule table. Mirrored by state_memory.go; allow.lua handles several rules.
-- KEYS[1] state; ARGV[1] now µs or "" for TIME; ARGV[2] n; ARGV[3] mode (0
-- allow, 1 reset); ARGV[4] capacity; ARGV[5] per_us; ARGV[6] rate; ARGV[7] delay (-1 none)
-- reply: {allowed (1/0), status, remaining, retry_us, reset_us, delay_us}
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[1])
  return {1}
end
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
local n, capacity, per, rate = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local floor = math.floor
-- fdiv/cdiv as in common.lua, inlined: floor and ceil of a / b for a >= 0.
local function fdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then return q - 1 elseif r >= b then return q + 1 end
  return q
end
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then return q + 1 end
  return q
end
local full = capacity * per
local level = 0
local v = redis.call('GET', KEYS[1])
if v then
  local tat, rem = v, 0
  local sp = string.find(v, ' ', 1, true)
  if sp then
    tat = string.sub(v, 1, sp - 1)
    rem = tonumber(string.sub(v, sp + 1))
  end
  local d = tonumber(tat) - now
  if d > 0 then
    local dmax = cdiv(full, rate)
    if d > dmax then d = dmax end
    level = d * rate - rem
    if level < 0 then level = 0 end
  end
end
if n > capacity then return {0, -1, fdiv(full - level, per), -1, cdiv(level, rate), 0} end
local nl = level + n * per
if nl > full then return {0, 0, fdiv(full - level, per), cdiv(nl - full, rate), cdiv(level, rate), 0} end
local wait = cdiv(nl, rate)
local dl = 0
local delay = tonumber(ARGV[7])
if delay >= 0 and n > 0 then
  local ex = nl - per - delay * per
  if ex > 0 then dl = cdiv(ex, rate) end
end
if n > 0 then
  local rem = wait * rate - nl
  local s = string.format('%d', now + wait)
  if rem ~= 0 then s = s .. ' ' .. string.format('%d', rem) end
  local ms = cdiv(wait, 1000)
  if ms < 1 then ms = 1 end
  redis.call('SET', KEYS[1], s, 'PX', ms)
end
return {1, 1, fdiv(full - nl, per), 0, wait, dl}
