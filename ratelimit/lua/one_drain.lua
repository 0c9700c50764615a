-- one_drain.lua: the fast path of a Limiter with a single drain rule
-- (TokenBucket, LeakyBucket or GCRA): limits.lua's drain_check and commit
-- for the "s" layout, inlined. It runs after codec.lua. Mirrored by
-- state_memory.go.
-- KEYS[1] state: the level L at time t (µs), in requests × per µs (codec.lua).
-- ARGV[1] now µs or "" for TIME; ARGV[2] n; ARGV[3] capacity; ARGV[4] per_us;
-- ARGV[5] rate; ARGV[6] delay (-1 none).
-- reply: allowed {remaining, reset_us, delay_us}; denied {status (0, or -1
-- when n can never be admitted), remaining, retry_us, reset_us}. Short
-- replies cost Redis less to encode.
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(now)
end
local n, capacity, per, rate = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local floor, ceil = math.floor, math.ceil
local full = capacity * per
local level = 0
local v = redis.call('GET', KEYS[1])
if v then
  local t
  t, level = drain_decode(v)
  local d = now - t
  if d > 0 then level = level - d * rate end
  if level < 0 then level = 0 elseif level > full then level = full end
end
if n > capacity then return {-1, floor((full - level) / per), -1, ceil(level / rate)} end
local nl = level + n * per
if nl > full then return {0, floor((full - level) / per), ceil((nl - full) / rate), ceil(level / rate)} end
local wait = ceil(nl / rate)
local dl = 0
if n > 0 then
  local delay = tonumber(ARGV[6])
  if delay >= 0 then
    local ex = nl - per - delay * per
    if ex > 0 then dl = ceil(ex / rate) end
  end
  redis.call('SET', KEYS[1], drain_encode(now, nl, rate), 'PX', ceil(wait / 1000))
end
return {floor((full - nl) / per), wait, dl}
