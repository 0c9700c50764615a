-- fail.lua: record one failed attempt; ban the key at the MaxFailures-th
-- failure within the window. Mirrored by memory.go (memFail).
-- KEYS[1] ban: string, the µs the ban ends (judged against now; its PX TTL
--   only collects garbage)
-- KEYS[2] failure log: zset, score = failure time µs, member "<µs>:<n>"
--   (unique also when failures share a microsecond)
-- ARGV[1] now µs or "" for TIME; ARGV[2] max failures; ARGV[3] window µs;
-- ARGV[4] ban µs
-- reply: {banned (1/0), remaining, retry_after µs}
-- Times stay below 2^53 (now plus at most ten years), exact in Lua's
-- doubles; they are passed to Redis as strings formatted with %d.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local max, window, ban = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local function istr(x) return string.format('%d', x) end

-- pttl: a lifetime in µs as whole milliseconds, rounded up, at least 1.
local function pttl(us)
  local ms = math.floor((us + 999) / 1000)
  if ms < 1 then return 1 end
  return ms
end

local untl = tonumber(redis.call('GET', KEYS[1]) or '0')
if untl > now then return {1, 0, untl - now} end -- banned: record nothing

-- Failures at or before now - window are out of the window.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', istr(now - window))
local n = redis.call('ZCARD', KEYS[2])
if n + 1 >= max then
  redis.call('DEL', KEYS[2])
  redis.call('SET', KEYS[1], istr(now + ban), 'PX', pttl(ban))
  return {1, 0, ban}
end
-- n < max <= 10000 entries, so the search for a free member is short.
local k = n
local member = istr(now) .. ':' .. k
while redis.call('ZSCORE', KEYS[2], member) do
  k = k + 1
  member = istr(now) .. ':' .. k
end
redis.call('ZADD', KEYS[2], istr(now), member)
redis.call('PEXPIRE', KEYS[2], pttl(window))
return {0, max - n - 1, 0}
