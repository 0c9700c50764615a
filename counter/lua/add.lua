-- add.lua: add a delta to a counter and return the new value; delta 0 only
-- reads. One atomic step, so no lock is needed around it. Mirrored by
-- memory.go.
-- KEYS[1] the counter: "p" a string; "t" a hash {v value, e expiry µs}; "w"
--   a string "<window number>:<value>" (the number depends on the server's
--   TIME, so it cannot be computed by the caller; a value of another window
--   reads 0).
-- ARGV[1] now µs or "" for TIME; ARGV[2] delta; ARGV[3] mode "p" plain, "t"
--   TTL, "w" window; for "t": ARGV[4] ttl µs, ARGV[5] refresh (1/0); for "w":
--   ARGV[4] window µs, ARGV[5] offset µs in [0, window), ARGV[6] margin µs.
-- KEYS[2] (optional, when delta ~= 0) the replay record of this call: same
--   hash tag, named by the call's ID, which a client's resend of the same
--   call repeats. The last two ARGV are then the call ID (unused here: it is
--   in KEYS[2]) and the record's lifetime in µs.
-- reply: {ok (1, or 0 when the new value would overflow and nothing
--   changed), value, reset_after µs (0 when the counter does not exist or
--   never expires)}
-- A replay (KEYS[2] exists) changes nothing and returns the first run's
-- reply: a retried Add counts once.
-- Values and deltas stay within ±(2^53-1) (checked here and by the caller),
-- so every number is an exact integer in Lua's doubles; integers are passed
-- to Redis as strings formatted with %d.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local delta, mode = tonumber(ARGV[2]), ARGV[3]
local MAX = 9007199254740991

local rec, recTTL = KEYS[2], 0
if delta == 0 then rec = nil end
if rec then
  local prev = redis.call('GET', rec)
  if prev then
    local a, b, c = string.match(prev, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
    return {tonumber(a), tonumber(b), tonumber(c)}
  end
  recTTL = tonumber(ARGV[#ARGV])
end

local function istr(x) return string.format('%d', x) end

-- fdiv: floor(a / b) for integers, b > 0, corrected for double rounding.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then return q - 1 elseif r >= b then return q + 1 end
  return q
end

-- pttl: a lifetime in µs as whole milliseconds, rounded up, at least 1.
local function pttl(us)
  local ms = fdiv(us + 999, 1000)
  if ms < 1 then return 1 end
  return ms
end

-- done records a changing reply for replays of this call, then returns it.
local function done(ok, v, left)
  if rec and ok == 1 then
    redis.call('SET', rec, istr(ok) .. ' ' .. istr(v) .. ' ' .. istr(left), 'PX', pttl(recTTL))
  end
  return {ok, v, left}
end

if mode == 't' then
  local ttl = tonumber(ARGV[4])
  local h = redis.call('HMGET', KEYS[1], 'v', 'e')
  local v, exp = 0, 0
  if h[2] and tonumber(h[2]) > now then
    v, exp = tonumber(h[1]), tonumber(h[2])
  end
  local left = 0
  if exp ~= 0 then left = exp - now end
  if delta == 0 then return {1, v, left} end
  local nv = v + delta
  if nv > MAX or nv < -MAX then return {0, v, left} end
  if exp == 0 or ARGV[5] == '1' then exp = now + ttl end
  redis.call('HSET', KEYS[1], 'v', istr(nv), 'e', istr(exp))
  redis.call('PEXPIRE', KEYS[1], pttl(exp - now))
  return done(1, nv, exp - now)
end

if mode == 'w' then
  -- The value is stored in the declared key as "<window id>:<value>", not
  -- in a key named here, so that Redis Cluster finds it on the node that has
  -- it while its slot migrates (ASK) and MIGRATE moves it whole; another
  -- window's value reads 0.
  local window, offset, margin = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
  local wid = fdiv(now - offset, window)
  local ws = istr(wid)
  local left = (wid + 1) * window + offset - now
  local v, reset = 0, 0
  local cur = redis.call('GET', KEYS[1])
  if cur then
    local w, x = string.match(cur, '^(%-?%d+):(%-?%d+)$')
    if w == ws then v, reset = tonumber(x), left end
  end
  if delta == 0 then return {1, v, reset} end
  local nv = v + delta
  if nv > MAX or nv < -MAX then return {0, v, reset} end
  redis.call('SET', KEYS[1], ws .. ':' .. istr(nv), 'PX', pttl(left + margin))
  return done(1, nv, left)
end

local cur = redis.call('GET', KEYS[1])
local v, reset = 0, 0
if cur then v = tonumber(cur) end
if delta == 0 then return {1, v, reset} end
local nv = v + delta
if nv > MAX or nv < -MAX then return {0, v, reset} end
redis.call('INCRBY', KEYS[1], ARGV[2])
return done(1, nv, 0)
