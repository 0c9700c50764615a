-- one_fixed.lua: the fast path of a Limiter with a single FixedWindow rule:
-- limits.lua's fixed_check and commit for the "s" layout, inlined. It runs
-- after codec.lua.
-- KEYS[1] state: the count c of window w (codec.lua). The count lives in the
-- declared key (not in a name built here), so that Redis Cluster finds it on
-- the node that has it while its slot migrates (ASK) and MIGRATE moves it
-- whole; an old window's count is never read again whatever Redis does with
-- its TTL. Mirrored by state_memory.go.
-- ARGV[1] now µs or "" for TIME; ARGV[2] n; ARGV[3] limit; ARGV[4] window_us
-- reply: as one_drain.lua's: allowed {remaining, reset_us, 0}; denied
-- {status (0, or -1 when n can never be admitted), remaining, retry_us, reset_us}.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
local n, limit, window = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local wid = math.floor(now / window)
local c = 0
local v = redis.call('GET', KEYS[1])
if v then c = fixed_count(v, wid) end
local left = (wid + 1) * window - now
local reset = 0
if c > 0 then reset = left end
if n > limit then return {-1, limit - c, -1, reset} end
if c + n > limit then return {0, limit - c, left, reset} end
if n > 0 then
  redis.call('SET', KEYS[1], fixed_encode(wid, c + n), 'PX', math.ceil(left / 1000))
  reset = left
end
return {limit - c - n, reset, 0}
