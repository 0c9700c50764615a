-- gcra.lua: the smallest useful GCRA, the ceiling that floodgate's scripts are
-- measured against (raw go-redis and rueidis EVALSHA loops, redis-benchmark).
-- KEYS[1] theoretical arrival time (µs); ARGV[1] rate per second; ARGV[2] burst.
-- reply: {allowed (1/0), retry_after_us}
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local emission = 1000000 / tonumber(ARGV[1])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new = tat + emission
local allow_at = new - emission * tonumber(ARGV[2])
if allow_at > now then return {0, math.ceil(allow_at - now)} end
redis.call('SET', KEYS[1], string.format('%d', new), 'PX', math.ceil((new - now) / 1000))
return {1, 0}
