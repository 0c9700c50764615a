-- rw_extend.lua: move the lease deadline of one side of an RWMutex, by its
-- holder only; never acquires.
-- KEYS as rw_acquire.lua: KEYS[1] writer hash, KEYS[3] readers zset,
-- KEYS[4] reader holds (the others unused)
-- ARGV[1] now µs or "" for TIME; ARGV[2] side 'r' or 'w'; ARGV[3] owner;
-- ARGV[4] ttl µs
-- reply: 1 extended, -1 not held (expired, taken over or gone).
local now = ARGV[1]
if now == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local owner, ttl = ARGV[3], tonumber(ARGV[4])
local ms = math.ceil(ttl / 1000)
local function int(x) return string.format('%d', x) end

if ARGV[2] == 'w' then
  local h = redis.call('HMGET', KEYS[1], 'o', 'd')
  if h[1] ~= owner or tonumber(h[2]) <= now then return -1 end
  redis.call('HSET', KEYS[1], 'd', int(now + ttl))
  redis.call('PEXPIRE', KEYS[1], ms)
  return 1
end
if tonumber(redis.call('ZSCORE', KEYS[3], owner) or '0') <= now then return -1 end
redis.call('ZADD', KEYS[3], int(now + ttl), owner)
for _, k in ipairs({KEYS[3], KEYS[4]}) do
  local pt = redis.call('PTTL', k)
  if pt ~= -2 and pt < ms then redis.call('PEXPIRE', k, ms) end
end
return 1
